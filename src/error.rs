//! Error types of the layers above the parsers, and the one place that maps them to errno
//! ([`FsError::errno`]: an exhaustive `match`; the FUSE adapter and the CLI make no errno
//! decisions of their own).

use std::path::PathBuf;

use crate::parse::{FormatError, ReadError};

/// An I/O error in words, as a user reads it: `no such file or directory`, `permission
/// denied`; never an `ErrorKind` debug name or a bare `(os error N)`.
pub(crate) fn io_words(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    if let Some(n) = e.raw_os_error() {
        // strerror's text ("No such file or directory"), without std's " (os error 2)".
        let text = std::io::Error::from_raw_os_error(n).to_string();
        let text = text
            .rsplit_once(" (os error ")
            .map_or(text.as_str(), |(t, _)| t)
            .to_string();
        let mut c = text.chars();
        return match c.next() {
            Some(f) => f.to_lowercase().chain(c).collect(),
            None => format!("error {n}"),
        };
    }
    if e.get_ref().is_some() {
        // An error with its own message (a remote store's "HTTP 404 Not Found"): as it is.
        return e.to_string();
    }
    match e.kind() {
        K::NotFound => "no such file or directory".into(),
        K::PermissionDenied => "permission denied".into(),
        K::UnexpectedEof => "the file ends early (truncated)".into(),
        K::TimedOut => "timed out".into(),
        K::InvalidData => format!("invalid data: {e}"),
        _ => e.to_string(),
    }
}

/// `path: msg`, or `msg` alone when it already starts by naming `path` (a remote store's errors
/// name their URL, and a remote source's paths are URLs: the URL is said once).
fn named(path: &std::path::Path, msg: &dyn std::fmt::Display) -> String {
    let p = path.display().to_string();
    let m = msg.to_string();
    if !p.is_empty() && m.starts_with(&p) {
        m
    } else {
        format!("{p}: {m}")
    }
}

/// Errors opening a source (mount time). Each message names the path and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A file of the source could not be read or listed.
    #[error("{}", named(path, &io_words(err)))]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        err: std::io::Error,
    },
    /// A file of the source is damaged or not of the format it was taken for.
    #[error("{}", named(path, err))]
    Format {
        /// The file.
        path: PathBuf,
        /// What the parser refused.
        err: FormatError,
    },
    /// Nothing recognised the path; `expected` lists what a SOURCE can be (from the table of
    /// formats, by the prober).
    #[error("{path}: not a TensorFlow checkpoint or SavedModel (expected {expected})")]
    NotRecognised {
        /// The SOURCE as given.
        path: PathBuf,
        /// What a SOURCE can be, in words.
        expected: String,
    },
    /// The source is readable but unusable as it is (a state file that is not one, or whose
    /// checkpoints are all missing; a directory holding no model yet): `msg` says why.
    #[error("{}", named(path, msg))]
    Invalid {
        /// The file or directory at fault.
        path: PathBuf,
        /// Why it cannot be used.
        msg: String,
    },
    /// A remote source's store failed (the message names the URL and the cause).
    #[error("{0}")]
    Remote(#[from] RemoteError),
}

/// `source`'s message without a leading `file: ` (a remote store's errors name their URL, which
/// the message already starts with).
fn without_name(file: &str, source: &FormatError) -> String {
    let m = source.to_string();
    match m.strip_prefix(file).and_then(|r| r.strip_prefix(": ")) {
        Some(rest) if !file.is_empty() => rest.to_string(),
        _ => m,
    }
}

/// Errors of filesystem operations.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// No such name in the directory, or no such inode (ENOENT).
    #[error("no such file or directory")]
    NotFound,
    /// A directory operation on something else (ENOTDIR).
    #[error("not a directory")]
    NotDir,
    /// A file operation on a directory (EISDIR).
    #[error("is a directory")]
    IsDir,
    /// `readlink` of something that is not a symbolic link (EINVAL).
    #[error("not a symbolic link")]
    NotSymlink,
    /// No extended attribute of that name (ENODATA).
    #[error("no such attribute")]
    NoAttr,
    /// The caller's buffer is smaller than the attribute value (ERANGE).
    #[error("buffer too small")]
    Range,
    /// A write of any kind: the mount is read-only (EROFS).
    #[error("read-only file system")]
    ReadOnly,
    /// An editable mount's directory that still holds tensors (ENOTEMPTY).
    #[error("directory not empty")]
    NotEmpty,
    /// An edit that means nothing (EINVAL): a file renamed to another kind of file, a write
    /// that is not a whole `.npy`.
    #[error("invalid argument")]
    Invalid,
    /// A name that is there already (EEXIST): `mkdir` of a directory holding tensors.
    #[error("file exists")]
    Exists,
    /// An edit an editable mount does not make (EPERM): a derived file written.
    #[error("operation not permitted")]
    Perm,
    /// Damaged or unreadable data: the operation fails, the mount goes on. `what` names the
    /// tensor or item (`tensor dense/kernel`), `file` the source file it lives in.
    #[error("{file}: {what}: {}", without_name(file, source))]
    Corrupt {
        /// The tensor or item (`tensor dense/kernel`).
        what: String,
        /// The source file it lives in.
        file: String,
        /// What the parser or the check refused.
        source: FormatError,
    },
    /// A read of the source failed (EIO, or the errno the system gave).
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl FsError {
    /// A damaged item `what` of source file `file`.
    pub(crate) fn corrupt(
        what: impl Into<String>,
        file: impl std::fmt::Display,
        source: FormatError,
    ) -> FsError {
        FsError::Corrupt {
            what: what.into(),
            file: file.to_string(),
            source,
        }
    }

    /// The errno the kernel gets. The only errno decision in the crate.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotSymlink => libc::EINVAL,
            FsError::NoAttr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::ReadOnly => libc::EROFS,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::Invalid => libc::EINVAL,
            FsError::Perm => libc::EPERM,
            FsError::Exists => libc::EEXIST,
            FsError::Corrupt { source, .. } => match source {
                // An operating-system error reading a source file keeps its errno.
                FormatError::Read(ReadError::Os(e)) => *e,
                FormatError::Read(
                    ReadError::Changed
                    | ReadError::Short
                    | ReadError::PastEnd { .. }
                    | ReadError::Other(_),
                )
                | FormatError::TooShort(_)
                | FormatError::BadMagic
                | FormatError::BadHandle { .. }
                | FormatError::BlockCrc { .. }
                | FormatError::BadBlockType(_)
                | FormatError::Snappy(_)
                | FormatError::BadBlock(_)
                | FormatError::UnsortedKeys
                | FormatError::BadVarint
                | FormatError::Proto(_)
                | FormatError::Zip(_)
                | FormatError::Version(_)
                | FormatError::BadEntry(_)
                | FormatError::DataTruncated { .. }
                | FormatError::BadSliceKey
                | FormatError::BadString(_)
                | FormatError::TensorCrc { .. }
                | FormatError::Text(_)
                | FormatError::Format(_) => libc::EIO,
            },
            FsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// Whether this is damage or an I/O failure worth a log line (not a plain "no such name").
    pub(crate) fn is_failure(&self) -> bool {
        matches!(self, FsError::Corrupt { .. } | FsError::Io(_))
    }
}

pub(crate) type FsResult<T> = std::result::Result<T, FsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        let c = |source| FsError::corrupt("tensor x", "f", source);
        assert_eq!(c(FormatError::BadVarint).errno(), libc::EIO);
        assert_eq!(
            c(FormatError::Read(ReadError::Os(libc::EACCES))).errno(),
            libc::EACCES
        );
        assert_eq!(c(FormatError::Read(ReadError::Changed)).errno(), libc::EIO);
        assert_eq!(FsError::NotFound.errno(), libc::ENOENT);
        assert_eq!(FsError::ReadOnly.errno(), libc::EROFS);
        let e = c(FormatError::TensorCrc {
            stored: 1,
            computed: 2,
        });
        assert!(e
            .to_string()
            .starts_with("f: tensor x: tensor checksum mismatch"));
    }
}

/// What went wrong with a remote operation. One line each, naming the object's full URL
/// (`scheme://host[:port]/key` or `s3://bucket/key`, never credentials) and the cause in words:
/// `http://127.0.0.1:8000/run/ckpt.index: HTTP 404 Not Found`, `...: connection refused`,
/// `...: timed out after 60s (remote_timeout)`, `s3://b/: no such bucket (HTTP 404 Not Found)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The object is not what was opened (rewritten, replaced or deleted): every later read of
    /// it fails the same way.
    #[error("{url}: changed since it was opened ({why})")]
    Changed {
        /// The object's URL.
        url: String,
        /// How the change showed (an ETag or size that differs, a 412, a 404).
        why: String,
    },
    /// No answer (or no success, after retries) within `remote_timeout`.
    #[error("{url}: timed out after {} (remote_timeout)", seconds(after))]
    Timeout {
        /// The object's URL.
        url: String,
        /// The bound that passed (`remote_timeout`).
        after: std::time::Duration,
    },
    /// The store answered 404 for the object.
    #[error("{url}: HTTP 404 Not Found")]
    NotFound {
        /// The object's URL.
        url: String,
    },
    /// The store cannot do this (listing over plain HTTP).
    #[error("{url}: {what}")]
    Unsupported {
        /// The URL asked about.
        url: String,
        /// What the store cannot do, in words.
        what: String,
    },
    /// A URL or credentials problem found before any request.
    #[error("{0}")]
    Config(String),
    /// The request failed (after retries): `msg` is the cause in words (`HTTP 403 Forbidden
    /// (AccessDenied: ...)`, `no such bucket (HTTP 404 Not Found)`, `connection refused`).
    #[error("{url}: {msg}")]
    Request {
        /// The object's URL.
        url: String,
        /// The cause in words.
        msg: String,
    },
    /// A read outside the object as opened.
    #[error("{url}: {len} bytes at offset {offset} lie past its end ({size} bytes)")]
    Range {
        /// The object's URL.
        url: String,
        /// Where the read started.
        offset: u64,
        /// How many bytes it asked for.
        len: u64,
        /// The object's size as opened.
        size: u64,
    },
}

impl RemoteError {
    pub(crate) fn kind(&self) -> std::io::ErrorKind {
        match self {
            RemoteError::NotFound { .. } => std::io::ErrorKind::NotFound,
            RemoteError::Timeout { .. } => std::io::ErrorKind::TimedOut,
            RemoteError::Unsupported { .. } => std::io::ErrorKind::Unsupported,
            RemoteError::Config(_) => std::io::ErrorKind::InvalidInput,
            RemoteError::Range { .. } => std::io::ErrorKind::UnexpectedEof,
            RemoteError::Changed { .. } | RemoteError::Request { .. } => std::io::ErrorKind::Other,
        }
    }
}

impl From<RemoteError> for std::io::Error {
    fn from(e: RemoteError) -> std::io::Error {
        std::io::Error::new(e.kind(), e.to_string())
    }
}

impl From<RemoteError> for crate::parse::FormatError {
    fn from(e: RemoteError) -> Self {
        // The message names the object and why (a rewrite, a timeout, ...).
        crate::parse::FormatError::Read(crate::parse::ReadError::Other(e.to_string()))
    }
}

/// `60s`, `1.5s`, `400ms`.
fn seconds(d: &std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{}ms", d.subsec_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}
