//! Mounting: options, checks before mounting, daemonizing with a readiness handshake, signals,
//! and the watchdog that removes the mount if the daemon dies; or, for the mount point
//! `/dev/fd/N` ([`fd`]), serving a `/dev/fuse` descriptor another process mounted; and the
//! privileged half of that, `tfmount mount-helper` ([`helper`]).

#[cfg(target_os = "linux")]
mod fd;
pub(crate) mod helper;
pub(crate) mod mountinfo;
mod nfs;

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

#[cfg(target_os = "linux")]
use fuser::{Config, MountOption, SessionACL};

use crate::cli::Args;
use crate::error::io_words;
use crate::fs::Fs;
#[cfg(target_os = "linux")]
use crate::fuse::FuseFs;
pub(crate) use crate::options::Settings;
use crate::{probe, source};

pub(crate) const EXIT_OK: i32 = 0;
pub(crate) const EXIT_RUNTIME: i32 = 1;
pub(crate) const EXIT_USAGE: i32 = 2;
pub(crate) const EXIT_SOURCE: i32 = 3;
pub(crate) const EXIT_MOUNTPOINT: i32 = 4;
pub(crate) const EXIT_FUSE: i32 = 5;

/// Why there is no FUSE mount on this OS, and the ways on (macOS, Windows: docs/macos.md).
#[cfg(not(target_os = "linux"))]
pub(crate) const NO_FUSE: &str = "tfmount mounts through FUSE on Linux only; here, mount over NFS (tfmount --nfs SOURCE MOUNTPOINT), or read the model without a mount: the subcommands (tfmount ls, cat, verify, diff, export: tfmount --help) or Python (import tfmount)";

/// A failure before or while mounting, with its exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: i32,
    pub(crate) msg: String,
}

fn fail(code: i32, msg: impl Into<String>) -> Failure {
    Failure {
        code,
        msg: msg.into(),
    }
}

/// Interprets `-o` options (and the flags that stand for them, which the command line turned
/// into `-o` entries after the others) through the one table, [`crate::options::OPTIONS`].
pub(crate) fn settings(args: &Args) -> Result<Settings, Failure> {
    let mut s = crate::options::settings(&args.options).map_err(|e| fail(EXIT_USAGE, e))?;
    s.fs.tags = args.tags.clone();
    Ok(s)
}

/// Whether `path` is a mount point right now (from /proc/self/mountinfo).
pub fn is_mount_point(path: &Path) -> bool {
    mountinfo::mounts().iter().any(|m| m.mountpoint == path)
}

/// Sets the readahead of the mount at `mountpoint` to [`crate::fuse::MAX_READAHEAD`]. The FUSE handshake
/// can only lower readahead below the kernel's default of 128 KiB per file, which makes a cold
/// sequential read a stream of 128 KiB requests; the mount's backing device takes a larger
/// value through `/sys/class/bdi/MAJOR:MINOR/read_ahead_kb`, writable by root only (and then
/// the kernel sends 1 MiB requests). Best effort: without permission this logs at debug level
/// and changes nothing. Call it once the mount exists; it sends no request to the mount.
#[cfg(target_os = "linux")]
pub fn raise_readahead(mountpoint: &std::path::Path) {
    let Some(dev) = mount_device(mountpoint) else {
        log::debug!("{}: not in /proc/self/mountinfo", mountpoint.display());
        return;
    };
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&knob, format!("{}\n", crate::fuse::MAX_READAHEAD / 1024)) {
        Ok(()) => log::debug!("{knob} = {} KiB", crate::fuse::MAX_READAHEAD / 1024),
        Err(e) => log::debug!("readahead stays at the kernel's default ({knob}: {e})"),
    }
}

/// The `MAJOR:MINOR` device of the file system mounted at `path` (the last mount there).
#[cfg(target_os = "linux")]
pub(crate) fn mount_device(path: &Path) -> Option<String> {
    mountinfo::mounts()
        .into_iter()
        .rev()
        .find(|m| m.mountpoint == path)
        .map(|m| m.device)
}

fn check_mountpoint(mp: &Path, nonempty: bool) -> Result<PathBuf, Failure> {
    let meta = std::fs::metadata(mp).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::NotFound {
            format!(" (create it first: mkdir -p {})", mp.display())
        } else {
            String::new()
        };
        fail(
            EXIT_MOUNTPOINT,
            format!("{}: mount point: {}{hint}", mp.display(), io_words(&e)),
        )
    })?;
    if !meta.is_dir() {
        return Err(fail(
            EXIT_MOUNTPOINT,
            format!("{}: mount point is not a directory", mp.display()),
        ));
    }
    let canon = std::fs::canonicalize(mp).map_err(|e| {
        fail(
            EXIT_MOUNTPOINT,
            format!("{}: mount point: {}", mp.display(), io_words(&e)),
        )
    })?;
    if is_mount_point(&canon) {
        return Err(fail(
            EXIT_MOUNTPOINT,
            format!(
                "{}: already a mount point (unmount it first: fusermount3 -u {})",
                mp.display(),
                mp.display()
            ),
        ));
    }
    if !nonempty {
        let mut entries = std::fs::read_dir(&canon).map_err(|e| {
            fail(
                EXIT_MOUNTPOINT,
                format!("{}: mount point: {}", mp.display(), io_words(&e)),
            )
        })?;
        if entries.next().is_some() {
            return Err(fail(
                EXIT_MOUNTPOINT,
                format!(
                    "{}: mount point is not empty (its files would be hidden while mounted; \
-o nonempty mounts anyway)",
                    mp.display()
                ),
            ));
        }
    }
    Ok(canon)
}

/// Why the kernel (or fusermount3) refused a mount with "permission denied", as far as can
/// be told from here, and what to do about it.
#[cfg(target_os = "linux")]
fn permission_words() -> String {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dev = Path::new("/dev/fuse");
    let usable = std::ffi::CString::new("/dev/fuse")
        .map(|c| {
            // SAFETY: `c` is a valid NUL-terminated path; access(2) only reads it.
            unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
        })
        .unwrap_or(false);
    if !usable {
        let how = std::fs::metadata(dev)
            .map(|m| {
                format!(
                    " (mode {:o}, owner uid {} gid {})",
                    m.permissions().mode() & 0o7777,
                    m.uid(),
                    m.gid()
                )
            })
            .unwrap_or_default();
        return format!(
            "permission denied: this user cannot read and write /dev/fuse{how}; it is normally mode 666, or join the group that owns it (in a container: --device /dev/fuse)"
        );
    }
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let setuid = [
            "/usr/bin/fusermount3",
            "/bin/fusermount3",
            "/usr/local/bin/fusermount3",
        ]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .any(|m| m.uid() == 0 && m.permissions().mode() & 0o4000 != 0);
        if !setuid {
            return "permission denied: a user other than root mounts through fusermount3, which must be installed setuid root (apt-get install fuse3)".into();
        }
        return "permission denied: the mount point must be a directory this user owns and may write, and FUSE mounts by users other than root must be allowed (in a container: --cap-add SYS_ADMIN and --device /dev/fuse)".into();
    }
    "permission denied by the kernel: in a container, FUSE needs --cap-add SYS_ADMIN (or --privileged) and --device /dev/fuse; a security module (AppArmor, SELinux) may also forbid it; or a privileged step mounts and tfmount serves the descriptor without privileges, as /dev/fd/N (tfmount mount-helper; docs/containers.md)".into()
}

/// The ways on without FUSE, said where FUSE is missing.
const NO_FUSE_WAYS: &str = "; without FUSE: tfmount --nfs SOURCE MOUNTPOINT mounts over NFS, tfmount --nfs-serve PORT SOURCE serves it for an NFS client, and `import tfmount` reads it in Python";

#[cfg(target_os = "linux")]
fn check_fuse() -> Result<(), Failure> {
    if !Path::new("/dev/fuse").exists() {
        return Err(fail(
            EXIT_FUSE,
            format!("FUSE is unavailable: /dev/fuse is missing (load the module with `modprobe fuse`, or run the container with --device /dev/fuse){}", NO_FUSE_WAYS),
        ));
    }
    let is_root = unsafe { libc::geteuid() } == 0;
    if !is_root && which("fusermount3").is_none() {
        return Err(fail(
            EXIT_FUSE,
            format!(
                "FUSE is unavailable: fusermount3 not found (install it: apt-get install fuse3){}",
                NO_FUSE_WAYS
            ),
        ));
    }
    Ok(())
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .as_bytes()
        .split(|&b| b == b':')
        .map(|d| Path::new(std::ffi::OsStr::from_bytes(d)).join(cmd))
        .find(|p| p.is_file())
}

fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0; 2];
    #[cfg(target_os = "linux")]
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // No pipe2 on macOS: close-on-exec set just after (this process starts no other thread
    // before it daemonizes).
    #[cfg(not(target_os = "linux"))]
    // SAFETY: a new pipe into a local array, then fcntl on its two fresh descriptors.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for fd in fds {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    // SAFETY: pipe2 (pipe) just returned these two fresh descriptors.
    unsafe {
        Ok((
            File::from(OwnedFd::from_raw_fd(fds[0])),
            File::from(OwnedFd::from_raw_fd(fds[1])),
        ))
    }
}

/// Entry point: returns the process exit code.
pub(crate) fn run(args: Args) -> i32 {
    match run_inner(args) {
        Ok(()) => EXIT_OK,
        Err(f) => {
            eprintln!("tfmount: {}", f.msg);
            f.code
        }
    }
}

/// Sets up logging before anything logs: to stderr, at `RUST_LOG` (default `warn`). In the
/// background the daemon's stderr becomes the `--log-file` (or /dev/null), see
/// [`detach_stdio`], so the same logger serves both.
fn init_logging() {
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .try_init();
}

/// The directories a local source is served from (its whole tree may be read while mounted:
/// a SavedModel's `assets/`, a followed checkpoint directory, a Keras or TF.js directory) and
/// the files it names, each canonical (symlinks resolved). Paths that cannot be resolved are
/// left out: they are not read either.
fn source_paths(given: &Path, probed: &probe::Probed) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    // A prefix (`train/ckpt-1`) is not a file itself: its directory, resolved, and its name.
    let canon_file = |p: &Path| {
        canon(p).or_else(|| {
            let name = p.file_name()?;
            let dir = match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            Some(canon(dir)?.join(name))
        })
    };
    let mut dirs = Vec::new();
    let mut files = Vec::new();
    if given.is_dir() {
        dirs.extend(canon(given));
    } else {
        files.extend(canon_file(given));
    }
    match probed {
        probe::Probed::SavedModel { dir, variables } => {
            dirs.extend(canon(dir));
            files.extend(variables.as_deref().and_then(canon_file));
        }
        probe::Probed::CheckpointDir {
            dir, checkpoints, ..
        } => {
            dirs.extend(canon(dir));
            files.extend(checkpoints.iter().filter_map(|(_, p)| canon_file(p)));
        }
        probe::Probed::Checkpoint(d) => {
            if d.path.is_dir() {
                dirs.extend(canon(&d.path));
            } else {
                files.extend(canon_file(&d.path));
            }
            files.extend(d.files.iter().filter_map(|p| canon_file(p)));
        }
        probe::Probed::Graph { path, .. } => files.extend(canon_file(path)),
    }
    (dirs, files)
}

/// Refuses a mount point inside the tree the mount serves (it would be listed through itself
/// without end, and the daemon's reads of its own mount would wait for each other: a mount
/// nothing but `/sys/fs/fuse/connections/N/abort` ends), and a SOURCE inside the mount point
/// (the mount would hide it). Decided on canonical paths, before mounting.
fn check_nesting(
    given: &Path,
    probed: &probe::Probed,
    mp_given: &Path,
    mp: &Path,
) -> Result<(), Failure> {
    let (dirs, files) = source_paths(given, probed);
    if let Some(dir) = dirs.iter().find(|d| mp.starts_with(d)) {
        let shown = if mp_given == mp {
            String::new()
        } else {
            format!(" (it is {})", mp.display())
        };
        return Err(fail(
            EXIT_MOUNTPOINT,
            format!(
                "{}: mount point is inside the source {}{shown}: the mount would show itself inside itself, without end; choose a mount point outside {}",
                mp_given.display(),
                given.display(),
                dir.display()
            ),
        ));
    }
    if let Some(p) = dirs.iter().chain(&files).find(|p| p.starts_with(mp)) {
        return Err(fail(
            EXIT_MOUNTPOINT,
            format!(
                "{}: the source {} is inside this mount point ({}): the mount would hide it; choose a mount point outside it",
                mp_given.display(),
                given.display(),
                p.display()
            ),
        ));
    }
    Ok(())
}

/// Opens SOURCE and builds its tree (a URL is not followed live). A local SOURCE is first
/// checked not to contain the mount point `mp` (canonical), nor to be inside it (`None`: a
/// descriptor someone else mounted, where it is not known).
fn open_fs(args: &Args, settings: &Settings, mp: Option<&Path>) -> Result<(Fs, String), Failure> {
    let src = probe::open(&args.source, &settings.remote)
        .map_err(|e| fail(EXIT_SOURCE, e.to_string()))?;
    if let (false, Some(mp)) = (src.remote, mp) {
        check_nesting(&args.source, &src.probed, args.mountpoint(), mp)?;
    }
    let mut opts = settings.fs.clone();
    if src.remote {
        opts.live = false;
    }
    let fsname = if src.remote {
        src.name.clone()
    } else {
        std::fs::canonicalize(&args.source)
            .unwrap_or_else(|_| args.source.clone())
            .to_string_lossy()
            .into_owned()
    };
    if let Some(dir) = &mut opts.edit {
        // An editable mount follows nothing: it is one checkpoint, as it was when mounted.
        opts.live = false;
        if dir.as_os_str().is_empty() {
            let env = crate::source::remote::config::Env::from_process();
            let cache = crate::source::remote::config::default_cache_dir(&env)
                .unwrap_or_else(std::env::temp_dir);
            let mp = mp
                .map(Path::to_path_buf)
                .unwrap_or_else(|| args.mountpoint().to_path_buf());
            *dir = crate::fs::edit::default_dir(&cache, &fsname, &mp);
            // Said where the user sees it: it is needed to commit, discard or remount them.
            eprintln!("tfmount: -o edit: the edits are kept in {}", dir.display());
        }
        log::info!("-o edit: the edits are kept in {}", dir.display());
    }
    let fs = Fs::with_store(src.store, &src.probed, &opts)
        .map_err(|e| fail(EXIT_SOURCE, e.to_string()))?;
    Ok((fs, fsname))
}

/// A mount point that failed its check, said as the arguments given in the wrong order when
/// they look so: MOUNTPOINT is a model (or a URL) and SOURCE an existing directory.
fn swapped(args: &Args, settings: &Settings, f: Failure) -> Failure {
    let (src, mp) = (&args.source, args.mountpoint());
    // A mount point already in use (a second mount on it) keeps its own message.
    let mounted = std::fs::canonicalize(mp).is_ok_and(|c| is_mount_point(&c));
    if !src.is_dir() || mounted {
        return f;
    }
    let url = source::remote::url::is_remote(&mp.to_string_lossy());
    let model = url
        || matches!(
            probe::open(mp, &settings.remote).map(|s| s.probed),
            Ok(p) if !matches!(&p, probe::Probed::CheckpointDir { checkpoints, .. } if checkpoints.is_empty())
        );
    if !model {
        return f;
    }
    fail(
        f.code,
        format!(
            "{}: a model, not a mount point: SOURCE comes first, then MOUNTPOINT (tfmount {} {})",
            mp.display(),
            mp.display(),
            src.display()
        ),
    )
}

/// Where a daemon serves: a mount point it mounts, or a `/dev/fuse` descriptor someone else
/// mounted (the mount point `/dev/fd/N`).
enum Target {
    #[cfg(target_os = "linux")]
    Mount(PathBuf),
    #[cfg(target_os = "linux")]
    Fd { fd: OwnedFd, shown: PathBuf },
    /// Served over NFS at `listen` (`--nfs-serve`), and mounted on `mountpoint` with the
    /// system's NFS client (`--nfs`).
    Nfs {
        mountpoint: Option<PathBuf>,
        listen: std::net::SocketAddr,
    },
}

impl Target {
    /// The mount point, when this process mounts it.
    fn mountpoint(&self) -> Option<&Path> {
        match self {
            #[cfg(target_os = "linux")]
            Target::Mount(mp) => Some(mp),
            Target::Nfs { mountpoint, .. } => mountpoint.as_deref(),
            #[cfg(target_os = "linux")]
            Target::Fd { .. } => None,
        }
    }

    /// As the user named it, for messages.
    fn shown(&self) -> &Path {
        match self {
            #[cfg(target_os = "linux")]
            Target::Mount(mp) | Target::Fd { shown: mp, .. } => mp,
            Target::Nfs { mountpoint, .. } => mountpoint.as_deref().unwrap_or(Path::new("")),
        }
    }
}

/// The target of `args`: NFS (`--nfs-serve`, `--nfs`), `/dev/fd/N` checked to be a
/// `/dev/fuse` descriptor, or the mount point checked, and FUSE checked to be usable for
/// mounting.
fn target(args: &Args, settings: &Settings) -> Result<Target, Failure> {
    if args.nfs || args.nfs_serve.is_some() {
        nfs_ignores(settings);
    }
    if let Some(listen) = &args.nfs_serve {
        let listen = crate::nfs::parse_listen(listen).map_err(|e| fail(EXIT_USAGE, e))?;
        if !listen.ip().is_loopback() {
            eprintln!(
                "tfmount: warning: --nfs-serve {listen}: serving beyond this machine: NFSv3 trusts whatever user id a client claims, so anyone who can reach {listen} can read the whole tree"
            );
        }
        return Ok(Target::Nfs {
            mountpoint: None,
            listen,
        });
    }
    if args.nfs {
        let mountpoint = check_mountpoint(args.mountpoint(), settings.nonempty)
            .map_err(|f| swapped(args, settings, f))?;
        return Ok(Target::Nfs {
            mountpoint: Some(mountpoint),
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        });
    }
    fuse_target(args, settings)
}

/// Warns of the options given that only FUSE mounts have: who may use an NFS mount is the
/// client's and its mount's business, and its client caches pages as it will.
fn nfs_ignores(settings: &Settings) {
    let mut fuse_only: Vec<&str> = settings
        .mount_time
        .iter()
        .copied()
        .filter(|o| *o != "nonempty")
        .filter(|o| crate::options::find(o).is_some_and(|o| !o.no_op))
        .collect();
    if settings.direct_io != crate::fs::subtree::DirectIo::default() {
        fuse_only.push("direct_io");
    }
    if !fuse_only.is_empty() {
        eprintln!(
            "tfmount: warning: -o {} ignored: FUSE's options, which an NFS mount does not have",
            fuse_only.join(",")
        );
    }
}

/// FUSE is Linux's: elsewhere the mount form without `--nfs` says so, naming the ways on.
#[cfg(not(target_os = "linux"))]
fn fuse_target(args: &Args, _settings: &Settings) -> Result<Target, Failure> {
    Err(fail(
        EXIT_FUSE,
        format!("{}: {NO_FUSE}", args.mountpoint().display()),
    ))
}

/// The FUSE part of [`target`].
#[cfg(target_os = "linux")]
fn fuse_target(args: &Args, settings: &Settings) -> Result<Target, Failure> {
    if let Some(n) = fd::parse(args.mountpoint()) {
        let fd = fd::take(n?, args.mountpoint())?;
        let theirs: Vec<&str> = settings
            .mount_time
            .iter()
            .copied()
            // What changes nothing (ro, nodev, ...: always on) is not worth a warning.
            .filter(|o| crate::options::find(o).is_some_and(|o| !o.no_op))
            .collect();
        if !theirs.is_empty() {
            eprintln!(
                "tfmount: warning: {}: -o {} ignored: with a descriptor someone else mounted, mount options are the mounter's to set (tfmount mount-helper -o allow_other, or mount -o ...)",
                args.mountpoint().display(),
                theirs.join(",")
            );
        }
        return Ok(Target::Fd {
            fd,
            shown: args.mountpoint().to_path_buf(),
        });
    }
    if let Some(o) = settings
        .mount_time
        .iter()
        .find(|o| crate::options::FROM_MOUNT_FUSE.contains(o))
    {
        return Err(fail(
            EXIT_USAGE,
            format!("-o {o}: tfmount mounts are always nodev and nosuid ({o} is accepted only with the mount point /dev/fd/N, where mount.fuse3 passes it)"),
        ));
    }
    let mountpoint = check_mountpoint(args.mountpoint(), settings.nonempty)
        .map_err(|f| swapped(args, settings, f))?;
    check_fuse()?;
    Ok(Target::Mount(mountpoint))
}

fn run_inner(args: Args) -> Result<(), Failure> {
    init_logging();
    let settings = settings(&args)?;
    let remote = source::remote::url::is_remote(&args.source.to_string_lossy());
    let target = target(&args, &settings)?;
    raise_fd_limit();
    // A server only (`--nfs-serve`) stays in the foreground, as servers run under a terminal
    // or a service manager do.
    let serve_only = matches!(
        target,
        Target::Nfs {
            mountpoint: None,
            ..
        }
    );
    if args.foreground || serve_only {
        let (fs, fsname) = open_fs(&args, &settings, target.mountpoint())?;
        return serve(fs, target, &fsname, &settings, None);
    }
    // The daemon's log goes to --log-file: open it now, so that a path that cannot be written
    // is an error the user sees.
    let log_file = match &args.log_file {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| {
                    fail(
                        EXIT_USAGE,
                        format!("{}: log file: {}", p.display(), io_words(&e)),
                    )
                })?,
        ),
        None => None,
    };
    // Open the source before forking, so its errors reach the user with the right exit code.
    // A remote store runs threads, which do not survive fork(): it is opened once, in the
    // daemon, before its stdio is detached (its warnings reach the terminal, as here), its
    // errors sent back through the readiness pipe with their exit code. (It was opened here
    // too, to check it: every request of the mount was sent twice, one after the other.)
    let opened = if remote {
        None
    } else {
        Some(open_fs(&args, &settings, target.mountpoint())?)
    };
    let (mut ready_r, ready_w) = pipe().map_err(|e| fail(EXIT_RUNTIME, format!("pipe: {e}")))?;
    match unsafe { libc::fork() } {
        -1 => Err(fail(
            EXIT_RUNTIME,
            format!("fork: {}", std::io::Error::last_os_error()),
        )),
        0 => {
            drop(ready_r);
            unsafe { libc::setsid() };
            let opened = match opened {
                Some(o) => Ok(o),
                None => open_fs(&args, &settings, target.mountpoint()),
            };
            detach_stdio(log_file.as_ref());
            let served = match opened {
                Ok((fs, fsname)) => serve(fs, target, &fsname, &settings, Some(ready_w)),
                Err(f) => {
                    let mut w = ready_w;
                    let _ = writeln!(w, "{}:{}", f.code, f.msg);
                    Err(f)
                }
            };
            let code = match served {
                Ok(()) => EXIT_OK,
                Err(f) => {
                    log::error!("{}", f.msg);
                    f.code
                }
            };
            std::process::exit(code);
        }
        _child => {
            drop(ready_w);
            // "ok:" and a newline (the daemon serves on), or "<exit code>:<message>" up to EOF
            // (the daemon exited; a message may have several lines), or EOF if it died.
            let mut raw = Vec::new();
            let mut byte = [0u8; 1];
            while let Ok(1) = ready_r.read(&mut byte) {
                if byte[0] == b'\n' && raw == b"ok:" {
                    break;
                }
                raw.push(byte[0]);
            }
            let msg = String::from_utf8_lossy(&raw);
            let msg = msg.strip_suffix('\n').unwrap_or(&msg);
            match msg.split_once(':') {
                Some(("ok", _)) => Ok(()),
                Some((code, m)) => Err(fail(code.parse().unwrap_or(EXIT_RUNTIME), m.to_string())),
                None => Err(fail(
                    EXIT_RUNTIME,
                    "the daemon exited before the mount was ready",
                )),
            }
        }
    }
}

/// Points stdin and stdout at /dev/null and stderr (where the log goes) at `log` or /dev/null.
fn detach_stdio(log: Option<&File>) {
    use std::os::fd::AsRawFd;
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        for fd in 0..3 {
            // SAFETY: both descriptors are open.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    if let Some(f) = log {
        // SAFETY: both descriptors are open.
        unsafe { libc::dup2(f.as_raw_fd(), 2) };
    }
}

/// Starts the watchdog: a process that waits until this one has exited (however it exited)
/// and then detaches the mount if it is still there, so a killed daemon leaves nothing behind.
#[cfg(target_os = "linux")]
fn spawn_watchdog(mountpoint: &Path, close_in_child: Option<i32>) -> Result<File, Failure> {
    let (r, w) = pipe().map_err(|e| fail(EXIT_RUNTIME, format!("pipe: {e}")))?;
    let mp = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| fail(EXIT_MOUNTPOINT, "mount point path contains NUL"))?;
    match unsafe { libc::fork() } {
        -1 => Err(fail(
            EXIT_RUNTIME,
            format!("fork: {}", std::io::Error::last_os_error()),
        )),
        0 => {
            drop(w);
            if let Some(fd) = close_in_child {
                // The readiness pipe: the parent waits for its writers to finish.
                unsafe { libc::close(fd) };
            }
            unsafe {
                libc::signal(libc::SIGINT, libc::SIG_IGN);
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
                libc::signal(libc::SIGHUP, libc::SIG_IGN);
            }
            let mut r = r;
            let mut buf = [0u8; 1];
            while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
            if is_mount_point(mountpoint) {
                let _ = unsafe { libc::umount2(mp.as_ptr(), libc::MNT_DETACH) };
                if is_mount_point(mountpoint) {
                    let _ = std::process::Command::new("fusermount3")
                        .arg("-u")
                        .arg("-z")
                        .arg(mountpoint)
                        .status();
                }
            }
            unsafe { libc::_exit(0) };
        }
        _ => {
            drop(r);
            Ok(w)
        }
    }
}

/// Every data shard stays open while mounted: lift the soft limit on open files to the hard one
/// (as Go's runtime does), so checkpoints with many shards do not run out of descriptors.
fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max.min(1 << 20);
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// The failure of a mount by this process, in words.
#[cfg(target_os = "linux")]
fn mount_failed(mountpoint: &Path, e: &std::io::Error) -> Failure {
    // fuser's fallback to fusermount3 reports the refusal as its words (EPERM: a process
    // without CAP_SYS_ADMIN, where the setuid fusermount3 cannot regain it either).
    let denied = e.kind() == std::io::ErrorKind::PermissionDenied
        || e.to_string()
            .trim_end()
            .ends_with("mount failed: Operation not permitted");
    let code = if denied { EXIT_FUSE } else { EXIT_RUNTIME };
    let why = if denied {
        permission_words()
    } else {
        e.to_string()
    };
    fail(
        code,
        format!("{}: mount failed: {why}", mountpoint.display()),
    )
}

/// The failure of serving a `/dev/fuse` descriptor someone else mounted, in words.
#[cfg(target_os = "linux")]
fn fd_failed(shown: &Path, e: &std::io::Error) -> Failure {
    match e.kind() {
        // read(2) of a /dev/fuse descriptor that no mount uses yet fails with EPERM.
        std::io::ErrorKind::PermissionDenied => fail(
            EXIT_USAGE,
            format!(
                "{}: this /dev/fuse descriptor is not mounted: the mounter mounts it first (tfmount mount-helper, or mount -i -t fuse.tfmount -o fd=N,rootmode=40000,user_id=U,group_id=G tfmount MOUNTPOINT), then starts tfmount",
                shown.display()
            ),
        ),
        std::io::ErrorKind::NotConnected => fail(
            EXIT_RUNTIME,
            format!(
                "{}: the mount was removed before tfmount could serve it",
                shown.display()
            ),
        ),
        _ => fail(
            EXIT_RUNTIME,
            format!("{}: cannot serve this /dev/fuse descriptor: {e}", shown.display()),
        ),
    }
}

/// Unmounts like `umount` (`lazy`: like `umount -l`), directly when allowed, else through
/// `fusermount3`. Fails when the mount is busy and not `lazy`.
pub(crate) fn unmount(mountpoint: &Path, lazy: bool) -> Result<(), String> {
    let mp = CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| "mount point path contains NUL".to_string())?;
    // SAFETY: a valid C string.
    #[cfg(target_os = "linux")]
    let r = unsafe { libc::umount2(mp.as_ptr(), if lazy { libc::MNT_DETACH } else { 0 }) };
    // macOS and the BSDs detach nothing lazily: `lazy` forces, as `umount -f` does (the files
    // still open on it then fail).
    // SAFETY: a valid C string.
    #[cfg(not(target_os = "linux"))]
    let r = unsafe { libc::unmount(mp.as_ptr(), if lazy { libc::MNT_FORCE } else { 0 }) };
    if r == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    // EINVAL: not a mount point (any more). Someone else (`fusermount3 -u`) unmounted it first:
    // what was asked is done.
    if err.raw_os_error() == Some(libc::EINVAL) && !is_mount_point(mountpoint) {
        return Ok(());
    }
    if err.raw_os_error() != Some(libc::EPERM) || cfg!(not(target_os = "linux")) {
        return Err(io_words(&err));
    }
    let mut cmd = std::process::Command::new("fusermount3");
    cmd.args(if lazy {
        &["-u", "-q", "-z"][..]
    } else {
        &["-u", "-q"][..]
    });
    match cmd.arg("--").arg(mountpoint).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(format!("fusermount3: {e}")),
    }
}

/// glibc gives each thread that allocates its own malloc arena (up to 8 per core), each
/// holding on to what it freed: a remote mount's read threads (up to 16, `fuse::Waiters`), each
/// allocating a reply buffer of up to 1 MiB, then held ~35 MiB more than the two serving
/// threads did. Two arenas keep that down.
fn limit_malloc_arenas(fs: &Fs) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if fs.is_remote() {
        // SAFETY: mallopt only sets a tunable of the allocator.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 2) };
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = fs;
}

/// Blocks SIGTERM, SIGINT and SIGHUP in this thread and those it starts (a child unblocks them
/// before exec); returns the set, for `sigwait`.
fn block_signals() -> libc::sigset_t {
    // SAFETY: plain signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Replies of tensor bytes from mappings of the source files (one copy of each byte); a page
/// lost to a truncation is then EIO, not SIGBUS. Without the guard, files are read with pread.
fn install_mapped_reads() {
    if let Err(e) = crate::source::mapped::install_guard() {
        log::warn!("cannot install the SIGBUS guard ({e}); tensor bytes are copied with pread");
    } else if let Err(e) = crate::source::lease::install() {
        // A file is mapped only under a read lease (a mapped reply racing a writer could carry
        // the writer's bytes): none can be taken now.
        log::warn!("cannot take read leases ({e}); tensor bytes are copied with pread");
    }
}

/// The mount serves: said to the parent waiting for it ("ok:"), or in the foreground on
/// stdout, once: the mount exists and the kernel queues its requests for the session (or the
/// NFS client has mounted), served from here on. False when there is neither (a server only,
/// or a descriptor someone else mounted, in the foreground).
fn say_ready(ready: Option<File>, mp: Option<&Path>, fsname: &str) -> bool {
    match (ready, mp) {
        (Some(mut w), _) => {
            let _ = w.write_all(b"ok:\n");
            true
        }
        (None, Some(mp)) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "mounted {fsname} at {}", mp.display());
            let _ = out.flush();
            true
        }
        (None, None) => false,
    }
}

fn serve(
    fs: Fs,
    target: Target,
    fsname: &str,
    s: &Settings,
    ready: Option<File>,
) -> Result<(), Failure> {
    match target {
        // Where there is no FUSE, the NFS adapter is the one way to serve (no watchdog: it has
        // no lazy unmount to make there; the server stops when the mount goes).
        #[cfg(not(target_os = "linux"))]
        Target::Nfs { mountpoint, listen } => {
            // The settings are FUSE's (the NFS server takes none).
            let _ = s;
            install_mapped_reads();
            let signals = block_signals();
            limit_malloc_arenas(&fs);
            nfs::serve(
                std::sync::Arc::new(fs),
                mountpoint,
                listen,
                fsname,
                signals,
                ready,
            )
        }
        #[cfg(target_os = "linux")]
        target => serve_linux(fs, target, fsname, s, ready),
    }
}

/// [`serve`] on Linux: FUSE, or NFS with the same watchdog.
#[cfg(target_os = "linux")]
fn serve_linux(
    fs: Fs,
    target: Target,
    fsname: &str,
    s: &Settings,
    ready: Option<File>,
) -> Result<(), Failure> {
    use std::os::fd::AsRawFd;
    // A descriptor someone else mounted is theirs to unmount: no watchdog (this process could
    // not unmount it; `tfmount mount-helper` removes the mount if its command fails).
    let _watchdog = match target.mountpoint() {
        Some(mp) => Some(spawn_watchdog(mp, ready.as_ref().map(|f| f.as_raw_fd()))?),
        None => None,
    };
    install_mapped_reads();
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(fsname.to_string()),
        MountOption::Subtype("tfmount".to_string()),
        if fs.editing().is_some() {
            MountOption::RW
        } else {
            MountOption::RO
        },
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::DefaultPermissions,
    ];
    config.acl = match s.acl {
        crate::options::Access::Owner => SessionACL::Owner,
        crate::options::Access::RootAndOwner => SessionACL::RootAndOwner,
        crate::options::Access::All => SessionACL::All,
    };
    config.n_threads = Some(s.threads);
    let signals = block_signals();
    limit_malloc_arenas(&fs);
    let fs = std::sync::Arc::new(fs);
    let fuse_fs = FuseFs::new(fs.clone(), s.direct_io);
    let unmounter = fuse_fs.unmounter();
    let shown = target.shown().to_path_buf();
    let target_mp = target.mountpoint().map(Path::to_path_buf);
    let (session, mountpoint) = match target {
        Target::Mount(mp) => (
            fuser::Session::new(fuse_fs, &mp, &config).map_err(|e| mount_failed(&mp, &e)),
            Some(mp),
        ),
        // The kernel decides who may use the mount (the mounter's user_id and allow_other):
        // no second filter here.
        Target::Fd { fd, shown } => (
            fuser::Session::from_fd(fuse_fs, fd, SessionACL::All, config)
                .map_err(|e| fd_failed(&shown, &e)),
            None,
        ),
        Target::Nfs { mountpoint, listen } => {
            drop(fuse_fs);
            return nfs::serve(fs, mountpoint, listen, fsname, signals, ready);
        }
    };
    let mut session = match session {
        Ok(sess) => sess,
        Err(f) => {
            if let Some(mut w) = ready {
                let _ = writeln!(w, "{}:{}", f.code, f.msg);
            }
            return Err(f);
        }
    };
    if let Ok(mut slot) = unmounter.lock() {
        *slot = Some(session.unmount_callable());
    }
    match &mountpoint {
        Some(mp) => {
            log::info!("mounted {fsname} on {}", mp.display());
            raise_readahead(mp);
        }
        // Which mount the descriptor serves cannot be told from it; the mounter (which knows
        // the mount point, and alone may write the knob) raises the read-ahead:
        // `tfmount mount-helper` does.
        None => log::info!("serving {fsname} on {}", shown.display()),
    }
    fs.set_page_dropper(crate::fuse::invalidator(session.notifier()));
    fs.set_edit_notify(crate::fuse::invalidator(session.notifier()));
    if let Err(e) = fs.follow(crate::fuse::invalidator(session.notifier())) {
        log::warn!("cannot follow the checkpoint directory ({e}); it is mounted as a snapshot");
    }
    // For the log line at unmount (remote sources: requests made, bytes fetched).
    let stats = fs.clone();
    drop(fs);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut sig = 0;
            unsafe { libc::sigwait(&signals, &mut sig) };
            let Some(mp) = mountpoint else {
                // Not ours to unmount: exit (the kernel ends the session once the last
                // descriptor closes), and say so by the status, so that a mounter waiting
                // for this process (`tfmount mount-helper`) removes the mount.
                log::warn!(
                    "signal {sig}: exiting; the mount served through {} stays until its mounter unmounts it (its files fail with ENOTCONN until then)",
                    shown.display()
                );
                crate::source::remote::disk::flush_all(std::time::Duration::from_secs(30));
                std::process::exit(EXIT_RUNTIME);
            };
            log::info!("signal {sig}: unmounting");
            // Unmounted: the kernel ends the session and `run` returns. Busy (files are open):
            // as other FUSE daemons do on a signal, detach the mount lazily and exit; the files
            // still open then fail with ENOTCONN.
            if let Err(e) = unmount(&mp, false) {
                log::warn!(
                    "{}: {e}; detaching it lazily, files still open on it will fail with ENOTCONN",
                    mp.display()
                );
                if let Err(e) = unmount(&mp, true) {
                    log::error!("{}: lazy unmount failed: {e}", mp.display());
                }
                std::process::exit(EXIT_OK);
            }
        })
        .map_err(|e| fail(EXIT_RUNTIME, format!("thread: {e}")))?;
    say_ready(ready, target_mp.as_deref(), fsname);
    let r = session
        .run()
        .map_err(|e| fail(EXIT_RUNTIME, format!("session ended with an error: {e}")));
    // What the disk cache still has to write, written before the daemon ends.
    crate::source::remote::disk::flush_all(std::time::Duration::from_secs(30));
    if let Some(line) = stats.store_stats() {
        log::info!("{fsname}: {line}");
    }
    r
}
