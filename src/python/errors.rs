//! The Python exceptions: the core's errors in the CLI's words. `tfmount.Error` (an `OSError`)
//! for what tfmount refuses or cannot read, `tfmount.IntegrityError` (a `tfmount.Error`) for
//! damaged data (what a mount answers with EIO: a CRC-32C mismatch, a truncated shard), and
//! Python's own `FileNotFoundError`, `NotADirectoryError`, `IsADirectoryError`, `KeyError`.

use pyo3::exceptions::{PyFileNotFoundError, PyIsADirectoryError, PyNotADirectoryError, PyOSError};
use pyo3::PyErr;

use crate::error::FsError;
use crate::model::open::TreeError;

pyo3::create_exception!(
    tfmount,
    TfmountError,
    PyOSError,
    "What tfmount refuses or cannot read (its message says what and where)."
);
pyo3::create_exception!(
    tfmount,
    IntegrityError,
    TfmountError,
    "Damaged data: a tensor whose bytes fail their stored CRC-32C, a truncated or missing file (what a mount answers with EIO)."
);

/// An error of an operation on `what` (a path of the tree or a tensor key, for the message).
pub(crate) fn fs_error(what: &str, e: FsError) -> PyErr {
    tree_error(what, TreeError::from(e))
}

pub(crate) fn tree_error(what: &str, e: TreeError) -> PyErr {
    let msg = format!("{what}: {e}");
    match e {
        TreeError::NotFound => PyFileNotFoundError::new_err(msg),
        TreeError::NotDir => PyNotADirectoryError::new_err(msg),
        TreeError::IsDir => PyIsADirectoryError::new_err(msg),
        // The damage's own words name the tensor and the file.
        TreeError::Damaged(m) => IntegrityError::new_err(m),
        TreeError::BadLink(_) | TreeError::Other(_) => TfmountError::new_err(msg),
    }
}

/// Why a SOURCE could not be opened: `FileNotFoundError` when it is not there, else
/// `tfmount.Error`; the message as `tfmount ls` prints it.
pub(crate) fn open_error(e: crate::error::SourceError) -> PyErr {
    use crate::error::SourceError;
    let msg = e.to_string();
    match &e {
        SourceError::Io { err, .. } if err.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(msg)
        }
        _ => TfmountError::new_err(msg),
    }
}
