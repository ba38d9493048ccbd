//! `tfmount edits TARGET`: an editable mount's pending edits, tensor by tensor (the engine:
//! [`crate::model::edits`]), or `--discard` some or all of them. TARGET is the mount point
//! (which names its edits directory in the extended attribute [`EDITS_XATTR`] of its root, and
//! discards through [`DISCARD_XATTR`]: the daemon holds the edits) or the edits directory.

use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cli::EditsArgs;
use crate::formats::edits::Journal;
use crate::model::export::Step;
use crate::model::lines::closed;

use crate::fs::edit::{DISCARD_XATTR, EDITS_XATTR};

fn cpath(p: &Path) -> Result<CString, String> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| format!("{}: a path with a NUL", p.display()))
}

/// The value of extended attribute `name` of `path` (`None`: it has none).
fn get_xattr(path: &Path, name: &str) -> Result<Option<Vec<u8>>, String> {
    let (p, n) = (cpath(path)?, CString::new(name).map_err(|e| e.to_string())?);
    let mut buf = vec![0u8; 4096];
    // SAFETY: `p` and `n` are NUL-terminated, `buf` is writable for its length.
    #[cfg(target_os = "macos")]
    let r = unsafe {
        libc::getxattr(
            p.as_ptr(),
            n.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            0,
            0,
        )
    };
    // SAFETY: as above.
    #[cfg(not(target_os = "macos"))]
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => Ok(None),
            #[cfg(target_os = "macos")]
            Some(libc::ENOATTR) => Ok(None),
            _ => Err(format!("{}: {e}", path.display())),
        };
    }
    buf.truncate(r as usize);
    Ok(Some(buf))
}

/// Sets extended attribute `name` of `path`; the system's error as it is (its errno tells what
/// the daemon answered).
fn set_xattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let bad = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
    let (p, n) = (
        cpath(path).map_err(bad)?,
        CString::new(name).map_err(|e| bad(e.to_string()))?,
    );
    // SAFETY: `p` and `n` are NUL-terminated, `value` is readable for its length.
    #[cfg(target_os = "macos")]
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
            0,
        )
    };
    // SAFETY: as above.
    #[cfg(not(target_os = "macos"))]
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `target` is an edits directory (else it may be a mount).
fn is_edits_dir(target: &Path) -> bool {
    target.join(crate::formats::edits::JOURNAL).is_file()
}

/// The edits directory of TARGET: itself, or the one the mount at TARGET names.
pub(crate) fn dir_of(target: &Path) -> Result<PathBuf, String> {
    if is_edits_dir(target) {
        return Ok(target.to_path_buf());
    }
    match get_xattr(target, EDITS_XATTR) {
        Ok(Some(v)) => {
            use std::os::unix::ffi::OsStrExt;
            Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&v)))
        }
        Ok(None) => Err(format!(
            "{}: neither an editable tfmount mount (one mounted with -o edit) nor an edits directory (no journal in it)",
            target.display()
        )),
        Err(e) => Err(e),
    }
}

fn json_str(s: &[u8]) -> String {
    serde_json::Value::String(String::from_utf8_lossy(s).into_owned()).to_string()
}

fn json_line(s: &Step) -> String {
    match s {
        Step::Drop(k) => format!("{{\"type\":\"drop\",\"key\":{}}}", json_str(k)),
        Step::Rename(a, b) => format!(
            "{{\"type\":\"rename\",\"key\":{},\"to\":{}}}",
            json_str(a),
            json_str(b)
        ),
        Step::Set(k, shape, d) => format!(
            "{{\"type\":\"set\",\"key\":{},\"shape\":{shape:?},\"dtype\":{}}}",
            json_str(k),
            json_str(d.display_name().as_bytes())
        ),
        Step::Cast(k, a, b) => format!(
            "{{\"type\":\"cast\",\"key\":{},\"from\":{},\"to\":{}}}",
            json_str(k),
            json_str(a.display_name().as_bytes()),
            json_str(b.display_name().as_bytes())
        ),
    }
}

pub(crate) fn run(args: &EditsArgs) -> i32 {
    let dir = match dir_of(&args.target) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("tfmount edits: {e}");
            return 3;
        }
    };
    if args.discard {
        return discard(args, &dir);
    }
    let (journal, ck) = match crate::model::edits::open(&dir) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("tfmount edits: {e}");
            return 3;
        }
    };
    let Some(set) = ck.tensors() else {
        eprintln!("tfmount edits: {}: no tensors to edit", dir.display());
        return 3;
    };
    let steps = match crate::model::edits::changes(set.clone(), &journal) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tfmount edits: {e}");
            return 3;
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for s in &steps {
        let line = if args.json { json_line(s) } else { s.line() };
        if let Err(e) = writeln!(out, "{line}") {
            if !closed(&e) {
                eprintln!("tfmount edits: stdout: {e}");
            }
            return 0;
        }
    }
    let _ = out.flush();
    0
}

fn discard(args: &EditsArgs, dir: &Path) -> i32 {
    let keys: Vec<&[u8]> = args.keys.iter().map(|k| k.as_bytes()).collect();
    if !is_edits_dir(&args.target) {
        // A mount: its daemon holds the edits and discards them.
        let payload = args.keys.join("\n");
        return match set_xattr(&args.target, DISCARD_XATTR, payload.as_bytes()) {
            Ok(()) => 0,
            // The daemon's answer when no edit names any of the keys (ENODATA).
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::ENOENT)) => {
                eprintln!(
                    "tfmount edits: {}: no edit names {}",
                    args.target.display(),
                    args.keys.join(", ")
                );
                1
            }
            Err(e) => {
                eprintln!("tfmount edits: {}: {e}", args.target.display());
                3
            }
        };
    }
    let source = match Journal::read(dir).and_then(|j| j.named_source()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tfmount edits: {e}");
            return 3;
        }
    };
    let mut j = match Journal::open(dir, &source) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("tfmount edits: {e}");
            return 3;
        }
    };
    let missing: Vec<&&[u8]> = keys
        .iter()
        .filter(|k| !j.records().iter().any(|r| r.names(k)))
        .collect();
    match j.discard(|r| !r.discarded_by(&keys)) {
        Ok(n) => {
            eprintln!("edits: {n} discarded from {}", dir.display());
            if missing.is_empty() {
                0
            } else {
                for k in missing {
                    eprintln!(
                        "tfmount edits: no edit names {}",
                        String::from_utf8_lossy(k)
                    );
                }
                1
            }
        }
        Err(e) => {
            eprintln!("tfmount edits: {e}");
            3
        }
    }
}
