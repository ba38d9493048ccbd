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
    #[error("{}", named(path, &io_words(err)))]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{}", named(path, err))]
    Format { path: PathBuf, err: FormatError },
    /// Nothing recognised the path; `expected` lists what a SOURCE can be (from the table of
    /// formats, by the prober).
    #[error("{path}: not a TensorFlow checkpoint or SavedModel (expected {expected})")]
    NotRecognised { path: PathBuf, expected: String },
    #[error("{}", named(path, msg))]
    Invalid { path: PathBuf, msg: String },
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
    #[error("no such file or directory")]
    NotFound,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("not a symbolic link")]
    NotSymlink,
    #[error("no such attribute")]
    NoAttr,
    #[error("buffer too small")]
    Range,
    #[error("read-only file system")]
    ReadOnly,
    /// Damaged or unreadable data: the operation fails, the mount goes on. `what` names the
    /// tensor or item (`tensor dense/kernel`), `file` the source file it lives in.
    #[error("{file}: {what}: {}", without_name(file, source))]
    Corrupt {
        what: String,
        file: String,
        source: FormatError,
    },
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
    Changed { url: String, why: String },
    /// No answer (or no success, after retries) within `remote_timeout`.
    #[error("{url}: timed out after {} (remote_timeout)", seconds(after))]
    Timeout {
        url: String,
        after: std::time::Duration,
    },
    /// The store answered 404 for the object.
    #[error("{url}: HTTP 404 Not Found")]
    NotFound { url: String },
    /// The store cannot do this (listing over plain HTTP).
    #[error("{url}: {what}")]
    Unsupported { url: String, what: String },
    /// A URL or credentials problem found before any request.
    #[error("{0}")]
    Config(String),
    /// The request failed (after retries): `msg` is the cause in words (`HTTP 403 Forbidden
    /// (AccessDenied: ...)`, `no such bucket (HTTP 404 Not Found)`, `connection refused`).
    #[error("{url}: {msg}")]
    Request { url: String, msg: String },
    /// A read outside the object as opened.
    #[error("{url}: {len} bytes at offset {offset} lie past its end ({size} bytes)")]
    Range {
        url: String,
        offset: u64,
        len: u64,
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
