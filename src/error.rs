//! Error types of the layers above the parsers, and the one place that maps them to errno.

use std::path::PathBuf;

use crate::format::FormatError;

/// Errors opening a source (mount time). Each message names the path and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Format { path: PathBuf, err: FormatError },
    #[error("{path}: not a TensorFlow checkpoint or SavedModel (expected a SavedModel directory with saved_model.pb, a checkpoint directory with a `checkpoint` file or *.index files, or a checkpoint prefix P with P.index)")]
    NotRecognised { path: PathBuf },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
}

/// Errors of filesystem operations. `errno()` is the only errno decision in the crate.
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
    /// Damaged or unreadable data: the read fails, the mount goes on.
    #[error("{0}")]
    Corrupt(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl FsError {
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotSymlink => libc::EINVAL,
            FsError::NoAttr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::Corrupt(_) => libc::EIO,
            FsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

pub type FsResult<T> = std::result::Result<T, FsError>;
