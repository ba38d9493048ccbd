//! What the writers of `export` share (`v2/write.rs`, `safetensors_write.rs`,
//! `saved_model_write.rs`): an output `OUT`
//! written under temporary names beside it (`.NAME.tfmount-tmp-PID...`), made whole, then
//! renamed into place; the temporaries of a writer whose process is gone removed by the next
//! writer there; errors in words naming the file.

use crate::sync::lock;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// What temporary names carry, after `.NAME`.
const TMP_TAG: &str = ".tfmount-tmp-";

/// An I/O error on `path`, in words.
pub(crate) fn named(path: &Path, e: io::Error) -> String {
    let why = match e.raw_os_error() {
        Some(libc::ENOSPC) => "no space left on the device".to_string(),
        Some(libc::EROFS) => "read-only file system".to_string(),
        Some(libc::EACCES) | Some(libc::EPERM) => "permission denied".to_string(),
        _ => e.to_string(),
    };
    format!("{}: {why}", path.display())
}

/// Whether process `pid` is alive (or cannot be told: then it is taken as alive).
fn alive(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Where an output goes: its directory (made if missing, as TensorFlow's saver does) and the
/// prefix of its temporaries.
pub(crate) struct Target {
    pub(crate) dir: PathBuf,
    /// `DIR/.NAME.tfmount-tmp-PID`.
    pub(crate) tmp: PathBuf,
}

impl Target {
    /// The target `out`; the temporaries a dead writer left there are removed.
    pub(crate) fn new(out: &Path) -> Result<Target, String> {
        let name = out
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("{}: not a file name to write to", out.display()))?
            .to_string();
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&dir).map_err(|e| named(&dir, e))?;
        remove_stale(&dir, &name);
        let tmp = dir.join(format!(".{name}{TMP_TAG}{}", std::process::id()));
        Ok(Target { dir, tmp })
    }

    /// A temporary's path: the prefix and `suffix`.
    pub(crate) fn tmp(&self, suffix: &str) -> PathBuf {
        let mut s = self.tmp.as_os_str().to_os_string();
        s.push(suffix);
        PathBuf::from(s)
    }

    /// A new temporary file (`suffix` after the prefix), readable too (its bytes are read back),
    /// behind a buffer of `buf` bytes.
    pub(crate) fn create(
        &self,
        suffix: &str,
        buf: usize,
    ) -> Result<(PathBuf, io::BufWriter<fs::File>), String> {
        let path = self.tmp(suffix);
        let f = fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| named(&path, e))?;
        Ok((path, io::BufWriter::with_capacity(buf, f)))
    }

    /// `fsync` of the directory, after the renames (best effort: some file systems refuse).
    pub(crate) fn sync_dir(&self) {
        if let Ok(d) = fs::File::open(&self.dir) {
            let _ = d.sync_all();
        }
    }
}

/// Removes the temporaries of writers of `NAME` in `dir` whose process is gone.
fn remove_stale(dir: &Path, name: &str) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    let lead = format!(".{name}{TMP_TAG}");
    for e in rd.flatten() {
        let f = e.file_name();
        let Some(rest) = f.to_str().and_then(|f| f.strip_prefix(&lead)) else {
            continue;
        };
        let pid = rest.split('.').next().and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| !alive(p)) {
            // A SavedModel's is a directory.
            let _ = match e.file_type() {
                Ok(t) if t.is_dir() => fs::remove_dir_all(e.path()),
                _ => fs::remove_file(e.path()),
            };
            log::info!("{}: removed, left by a killed export", e.path().display());
        }
    }
}

/// Writes exactly `size` bytes, handed over by `fill` through the sink it is given, to `out`
/// (the file at `path`); returns their CRC-32C. Fails if `fill` does, or hands over another
/// number of bytes.
pub(crate) fn stream(
    out: &mut io::BufWriter<fs::File>,
    path: &Path,
    size: u64,
    fill: impl FnOnce(&mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String>,
) -> Result<u32, String> {
    use std::io::Write;
    let mut crc = 0u32;
    let mut got = 0u64;
    let mut sink = |b: &[u8]| -> Result<(), String> {
        got += b.len() as u64;
        if got > size {
            return Err(format!("more than its {size} bytes"));
        }
        crc = crc32c::crc32c_append(crc, b);
        out.write_all(b).map_err(|e| named(path, e))
    };
    fill(&mut sink)?;
    if got != size {
        return Err(format!("{got} bytes, its shape and dtype make {size}"));
    }
    Ok(crc)
}

/// Copies `len` bytes of `src` from `offset` to the end of `dst` (at its file position, which
/// moves past them) in the kernel (`copy_file_range`: no copy through this process, a reflink
/// where the file system has them). `Ok(false)`, nothing copied, where the kernel cannot copy
/// between these two files (another file system on an old kernel, a file system without it,
/// an OS without it): the caller streams the bytes instead.
pub(crate) fn copy_range(
    src: &fs::File,
    offset: u64,
    dst: &fs::File,
    dst_path: &Path,
    len: u64,
) -> Result<bool, String> {
    let mut off_in = i64::try_from(offset).map_err(|_| "an offset past 2^63".to_string())?;
    let mut left = len;
    while left > 0 {
        let chunk = left.min(1 << 30) as usize;
        let n = match kernel_copy(src, &mut off_in, dst, chunk) {
            Ok(n) => n,
            Err(e) => {
                let unsupported = matches!(
                    e.raw_os_error(),
                    Some(libc::EXDEV | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL)
                );
                if unsupported && left == len {
                    return Ok(false);
                }
                return Err(named(dst_path, e));
            }
        };
        if n == 0 {
            return Err(format!(
                "{}: the source ended {left} bytes early while copied",
                dst_path.display()
            ));
        }
        left -= n as u64;
    }
    Ok(true)
}

/// `copy_file_range(2)` of up to `len` bytes of `src` from `*off_in` (advanced) to `dst` at its
/// file position (advanced); the bytes copied.
#[cfg(target_os = "linux")]
fn kernel_copy(src: &fs::File, off_in: &mut i64, dst: &fs::File, len: usize) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: two open descriptors, a valid pointer to the input offset, no output offset
    // (the file position is used and advanced).
    let n = unsafe {
        libc::copy_file_range(
            src.as_raw_fd(),
            off_in,
            dst.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            0,
        )
    };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// No `copy_file_range` on this OS: ENOSYS, so the caller streams the bytes.
#[cfg(not(target_os = "linux"))]
fn kernel_copy(_: &fs::File, _: &mut i64, _: &fs::File, _: usize) -> io::Result<usize> {
    Err(io::Error::from_raw_os_error(libc::ENOSYS))
}

/// One range of a written file to read back against a CRC-32C, on the [`Verifier`]'s thread.
struct Job {
    path: PathBuf,
    at: u64,
    end: u64,
    crc: u32,
    /// What a mismatch is said as, before the CRCs (`KEY: CRC-32C mismatch in its copy from
    /// FILE at OFFSET`).
    what: String,
}

/// Reads back ranges of written files on a thread of its own, while the writer goes on (a
/// kernel copy of the next tensor on one core, the read-back of the last on the other). The
/// first mismatch or error is kept: [`Verifier::failed`] says it (the writer's caller asks
/// before each tensor), [`Verifier::finish`] returns it; at most [`QUEUE`] ranges wait.
pub(crate) struct Verifier {
    tx: Option<std::sync::mpsc::SyncSender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
    err: std::sync::Arc<std::sync::Mutex<Option<String>>>,
}

/// Ranges waiting to be read back at most.
const QUEUE: usize = 64;

impl Verifier {
    pub(crate) fn new() -> Verifier {
        Verifier {
            tx: None,
            thread: None,
            err: std::sync::Arc::new(std::sync::Mutex::new(None)),
        }
    }

    /// The first error found so far.
    pub(crate) fn failed(&self) -> Option<String> {
        lock(&self.err).clone()
    }

    /// Queues bytes `[at, end)` of the file at `path` to be read back against `crc` (the
    /// thread started the first time; read back here if no thread can be started).
    pub(crate) fn check(
        &mut self,
        path: &Path,
        at: u64,
        end: u64,
        crc: u32,
        what: String,
    ) -> Result<(), String> {
        if self.tx.is_none() {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(QUEUE);
            let err = self.err.clone();
            let spawned = std::thread::Builder::new()
                .name("tfmount-readback".into())
                .spawn(move || {
                    let mut open: Option<(PathBuf, fs::File)> = None;
                    for job in rx {
                        if lock(&err).is_some() {
                            continue;
                        }
                        let r = Self::run(&mut open, &job);
                        if let Err(e) = r {
                            *lock(&err) = Some(e);
                        }
                    }
                });
            match spawned {
                Ok(t) => {
                    self.tx = Some(tx);
                    self.thread = Some(t);
                }
                // No thread: read back here.
                Err(_) => {
                    let mut open = None;
                    return Self::run(
                        &mut open,
                        &Job {
                            path: path.to_path_buf(),
                            at,
                            end,
                            crc,
                            what,
                        },
                    );
                }
            }
        }
        let job = Job {
            path: path.to_path_buf(),
            at,
            end,
            crc,
            what,
        };
        if let Some(tx) = &self.tx {
            if tx.send(job).is_err() {
                return Err(self
                    .failed()
                    .unwrap_or_else(|| "the read-back thread ended".into()));
            }
        }
        Ok(())
    }

    fn run(open: &mut Option<(PathBuf, fs::File)>, job: &Job) -> Result<(), String> {
        if open.as_ref().is_none_or(|(p, _)| *p != job.path) {
            let f = fs::File::open(&job.path).map_err(|e| named(&job.path, e))?;
            *open = Some((job.path.clone(), f));
        }
        let Some((_, f)) = open.as_ref() else {
            return Err(format!("{}: not open", job.path.display()));
        };
        let got = ReadBack::new(f, &job.path, job.end).crc(job.at, job.end)?;
        if got != job.crc {
            return Err(format!(
                "{} (stored {:#010x}, computed {got:#010x}; a damaged source tensor is never copied)",
                job.what, job.crc
            ));
        }
        Ok(())
    }

    /// Waits for every queued range; the first error found.
    pub(crate) fn finish(&mut self) -> Result<(), String> {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        match self.failed() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The CRC-32C of bytes `[at, end)` of `f` (`len` bytes long, just written and synced), read
/// back from a read-only mapping where the process guards them, else with `pread`.
pub(crate) struct ReadBack<'a> {
    f: &'a fs::File,
    path: &'a Path,
    map: Option<crate::source::mapped::Mapping>,
    buf: Vec<u8>,
}

impl<'a> ReadBack<'a> {
    pub(crate) fn new(f: &'a fs::File, path: &'a Path, len: u64) -> ReadBack<'a> {
        let map = (len > 0)
            .then(|| crate::source::mapped::Mapping::new(f, len))
            .flatten();
        ReadBack {
            f,
            path,
            map,
            buf: Vec::new(),
        }
    }

    pub(crate) fn crc(&mut self, at: u64, end: u64) -> Result<u32, String> {
        use std::os::unix::fs::FileExt;
        if let Some(m) = &self.map {
            let range = usize::try_from(at).ok().zip(usize::try_from(end).ok());
            if let Some(b) = range.and_then(|(a, z)| m.bytes().get(a..z)) {
                let (crc, lost) = crate::source::mapped::scope(|| crc32c::crc32c(b));
                if lost {
                    return Err(format!(
                        "{}: cut short while read back",
                        self.path.display()
                    ));
                }
                return Ok(crc);
            }
        }
        const BUF: usize = 1 << 20;
        let mut crc = 0u32;
        let mut at = at;
        self.buf.resize(BUF, 0);
        while at < end {
            let n = ((end - at) as usize).min(BUF);
            self.f
                .read_exact_at(&mut self.buf[..n], at)
                .map_err(|e| named(self.path, e))?;
            crc = crc32c::crc32c_append(crc, &self.buf[..n]);
            at += n as u64;
        }
        Ok(crc)
    }
}

#[cfg(test)]
mod verifier_tests {
    use super::*;

    #[test]
    fn the_verifier_reads_back_beside_the_writer_and_keeps_the_first_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        fs::write(&path, &bytes).unwrap();
        let crc = |a: usize, z: usize| crc32c::crc32c(&bytes[a..z]);
        let mut v = Verifier::new();
        v.check(&path, 0, 4096, crc(0, 4096), "a".into()).unwrap();
        v.check(&path, 4096, 100_000, crc(4096, 100_000), "b".into())
            .unwrap();
        assert_eq!(v.finish(), Ok(()));
        let mut v = Verifier::new();
        v.check(&path, 0, 10, crc(0, 10), "ok".into()).unwrap();
        v.check(
            &path,
            10,
            20,
            crc(10, 20) ^ 1,
            "k: CRC-32C mismatch in x".into(),
        )
        .unwrap();
        v.check(&path, 20, 30, 0, "later".into()).unwrap();
        let e = v.finish().unwrap_err();
        assert!(
            e.starts_with("k: CRC-32C mismatch in x (stored") && e.contains("never copied"),
            "{e}"
        );
        assert_eq!(v.failed(), Some(e));
    }
}
