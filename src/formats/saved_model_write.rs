//! Writing a SavedModel directory for `export --to savedmodel`, with the guarantees of the other
//! writers ([`super::output`]): the whole directory is made under a temporary name beside `OUT`
//! (`.NAME.tfmount-tmp-PID/`): SOURCE's files but its variables copied as they are
//! (`saved_model.pb`, `fingerprint.pb`, `assets/`, `assets.extra/`, ...; each `fsync`ed and read
//! back against the CRC-32C of the bytes read), its `variables/variables` checkpoint written by
//! [`super::v2::write::BundleWriter`] inside it, every directory `fsync`ed; then the directory
//! is renamed to `OUT` in one step. With `--force` an existing SavedModel at `OUT` is swapped
//! with the new one in one step (`renameat2(RENAME_EXCHANGE)`; where the file system cannot, it
//! is renamed aside first) and then removed. A killed export leaves only its temporary
//! directory, removed by the next export there.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::output::{named, ReadBack, Target};
use crate::source::bytes::{ByteSource, EntryKind, Store};

const BUF: usize = 1 << 20;

/// Whether `dir` holds a SavedModel's graph (what `--force` may replace).
fn is_saved_model(dir: &Path) -> bool {
    dir.join("saved_model.pb").is_file() || dir.join("saved_model.pbtxt").is_file()
}

/// A SavedModel directory being written to `OUT` (see the module's docs).
pub(crate) struct SavedModelWriter {
    out: PathBuf,
    target: Target,
    /// The temporary directory.
    dir: PathBuf,
    /// Bytes of files copied.
    copied: u64,
    finished: bool,
}

impl SavedModelWriter {
    /// A writer of the SavedModel directory `out`. `out` existing is refused unless `force`,
    /// and even then unless it is a SavedModel (or an empty directory): `--force` never removes
    /// a directory of something else.
    pub(crate) fn create(out: &Path, force: bool) -> Result<Self, String> {
        if let Ok(m) = fs::symlink_metadata(out) {
            if !force {
                return Err(format!("{}: exists (--force replaces it)", out.display()));
            }
            let empty = m.is_dir()
                && fs::read_dir(out)
                    .map(|mut d| d.next().is_none())
                    .unwrap_or(false);
            if !m.is_dir() || !(empty || is_saved_model(out)) {
                return Err(format!(
                    "{}: exists and is not a SavedModel directory (--force replaces only a SavedModel)",
                    out.display()
                ));
            }
        }
        let target = Target::new(out)?;
        let dir = target.tmp("");
        fs::create_dir(&dir).map_err(|e| named(&dir, e))?;
        Ok(SavedModelWriter {
            out: out.to_path_buf(),
            target,
            dir,
            copied: 0,
            finished: false,
        })
    }

    /// The prefix the variables checkpoint is written to (`variables/variables` of the
    /// temporary directory, made now).
    pub(crate) fn variables(&self) -> Result<PathBuf, String> {
        let v = self.dir.join("variables");
        fs::create_dir_all(&v).map_err(|e| named(&v, e))?;
        Ok(v.join("variables"))
    }

    /// Copies every file under `src` of `store` but `skip`'s (paths relative to `src`), keeping
    /// the tree's shape; each file `fsync`ed and read back. Returns the bytes copied.
    pub(crate) fn copy_tree(
        &mut self,
        store: &dyn Store,
        src: &Path,
        skip: &dyn Fn(&Path) -> bool,
    ) -> Result<u64, String> {
        // Depth-first over directories, with a bound on how deep (a link cycle is not followed
        // forever).
        let mut todo = vec![(PathBuf::new(), 0usize)];
        while let Some((rel, depth)) = todo.pop() {
            if depth > 64 {
                return Err(format!(
                    "{}: directories nested too deep",
                    src.join(&rel).display()
                ));
            }
            let from = src.join(&rel);
            let mut entries = store.list(&from).map_err(|e| named(&from, e))?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, kind) in entries {
                let r = rel.join(&name);
                if skip(&r) {
                    continue;
                }
                match kind {
                    EntryKind::Dir => {
                        let d = self.dir.join(&r);
                        fs::create_dir_all(&d).map_err(|e| named(&d, e))?;
                        todo.push((r, depth + 1));
                    }
                    EntryKind::File => {
                        let f = store
                            .open(&src.join(&r))
                            .map_err(|e| named(&src.join(&r), e))?;
                        self.copied += self.copy_file(&*f, &r)?;
                    }
                    EntryKind::Other => {
                        log::warn!(
                            "{}: not a file or directory, not copied",
                            src.join(&r).display()
                        );
                    }
                }
            }
        }
        Ok(self.copied)
    }

    /// Copies `f` to `rel` of the temporary directory: streamed, `fsync`ed, read back against
    /// the CRC-32C of the bytes read.
    fn copy_file(&self, f: &dyn ByteSource, rel: &Path) -> Result<u64, String> {
        let path = self.dir.join(rel);
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| named(&path, e))?;
        let mut out = BufWriter::with_capacity(BUF, file);
        let len = f.len();
        let mut buf = vec![0u8; BUF.min(len as usize)];
        let mut crc = 0u32;
        let mut at = 0u64;
        while at < len {
            let n = ((len - at) as usize).min(BUF);
            f.read_exact_at(&mut buf[..n], at)
                .map_err(|e| format!("{}: {e}", f.name().display()))?;
            crc = crc32c::crc32c_append(crc, &buf[..n]);
            out.write_all(&buf[..n]).map_err(|e| named(&path, e))?;
            at += n as u64;
        }
        out.flush().map_err(|e| named(&path, e))?;
        let file = out.into_inner().map_err(|e| named(&path, e.into_error()))?;
        file.sync_all().map_err(|e| named(&path, e))?;
        let got = ReadBack::new(&file, &path, len).crc(0, len)?;
        if got != crc {
            return Err(format!(
                "{}: the bytes read back differ from what was written",
                path.display()
            ));
        }
        Ok(len)
    }

    /// Makes the SavedModel whole at `OUT` (see the module's docs): every directory synced, the
    /// temporary directory renamed (swapped) into place. On failure the temporary directory is
    /// removed and `OUT` is as it was.
    pub(crate) fn finish(mut self) -> Result<PathBuf, String> {
        sync_dirs(&self.dir)?;
        if fs::symlink_metadata(&self.out).is_ok() {
            exchange(&self.dir, &self.out)?;
            // The old SavedModel is at the temporary name now: removed by Drop.
        } else {
            fs::rename(&self.dir, &self.out).map_err(|e| named(&self.out, e))?;
            self.finished = true;
        }
        self.target.sync_dir();
        Ok(self.out.clone())
    }
}

/// `fsync` of `dir` and every directory under it.
fn sync_dirs(dir: &Path) -> Result<(), String> {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).map_err(|e| named(&d, e))?.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                todo.push(e.path());
            }
        }
        File::open(&d)
            .and_then(|f| f.sync_all())
            .map_err(|e| named(&d, e))?;
    }
    Ok(())
}

/// Swaps `a` and `b` in one step (Linux's `renameat2(RENAME_EXCHANGE)`, macOS's
/// `renamex_np(RENAME_SWAP)`); where the file system or the OS cannot, `b` is renamed aside to
/// a name beside `a` first and `a` renamed to `b`, then the old `b` to `a` (left for removal).
fn exchange(a: &Path, b: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).ok();
    if let (Some(ca), Some(cb)) = (c(a), c(b)) {
        if let Some(r) = swap(&ca, &cb) {
            match r {
                Ok(()) => return Ok(()),
                // Not on this file system: renamed aside below.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINVAL | libc::ENOSYS | libc::ENOTSUP)
                    ) => {}
                Err(e) => return Err(named(b, e)),
            }
        }
    }
    let mut aside = a.as_os_str().to_os_string();
    aside.push(".old");
    let aside = PathBuf::from(aside);
    fs::rename(b, &aside).map_err(|e| named(b, e))?;
    if let Err(e) = fs::rename(a, b) {
        let _ = fs::rename(&aside, b);
        return Err(named(b, e));
    }
    fs::rename(&aside, a).map_err(|e| named(a, e))
}

/// The paths `a` and `b` swapped by one rename(2): Linux's `renameat2(RENAME_EXCHANGE)`.
#[cfg(target_os = "linux")]
fn swap(a: &std::ffi::CStr, b: &std::ffi::CStr) -> Option<std::io::Result<()>> {
    // SAFETY: two valid NUL-terminated paths, relative to the working directory.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    Some(last_os_result(r))
}

/// The paths `a` and `b` swapped by one rename(2): macOS's `renamex_np(RENAME_SWAP)`.
#[cfg(target_os = "macos")]
fn swap(a: &std::ffi::CStr, b: &std::ffi::CStr) -> Option<std::io::Result<()>> {
    // SAFETY: two valid NUL-terminated paths, relative to the working directory.
    let r = unsafe { libc::renamex_np(a.as_ptr(), b.as_ptr(), libc::RENAME_SWAP) };
    Some(last_os_result(r))
}

/// No rename(2) that swaps on this OS.
#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn swap(_a: &std::ffi::CStr, _b: &std::ffi::CStr) -> Option<std::io::Result<()>> {
    None
}

/// A system call's result: 0 is success, else errno says why.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn last_os_result(r: libc::c_int) -> std::io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Drop for SavedModelWriter {
    fn drop(&mut self) {
        if !self.finished {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}
