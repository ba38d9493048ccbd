//! Adapter: the Python module `tfmount._tfmount` (feature `python`; the wheel's `import
//! tfmount` wraps it in `python/tfmount/`). The same core the mount and the subcommands use,
//! without a kernel: a [`model::Model`] is the tree a mount shows (over [`crate::fs::Fs`], as
//! `model/open.rs`'s `Tree`) and the model's checkpoint, whose tensors it hands out as numpy
//! arrays ([`arrays`]: views of a mapping of the source file where the bytes lie there as
//! served, decoded copies otherwise); `verify` and `diff` are the subcommands' own engines,
//! their lines kept instead of printed; `main` is the command line itself.
//!
//! Reads run with the GIL released. Errors are Python exceptions with the CLI's words
//! ([`errors`]).

mod arrays;
mod errors;
mod model;

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::python::errors::{IntegrityError, TfmountError};

/// `tfmount.open(SOURCE, **options)`'s core: `options` are `-o` items (`name` or
/// `name=value`), `mmap` whether arrays may be views of mapped source files, `verify` whether
/// tensors' stored checksums are checked.
#[pyfunction]
#[pyo3(signature = (source, options, mmap = true, verify = true))]
fn open(
    py: Python<'_>,
    source: PathBuf,
    options: Vec<String>,
    mmap: bool,
    verify: bool,
) -> PyResult<model::Model> {
    py.detach(|| model::Model::open(&source, &options, mmap, verify))
        .map_err(errors::open_error)
}

/// `tfmount diff A B`'s lines: `(status, key)` with status `A`, `D`, `T`, `M` (and `=` with
/// `same`); with `names`, matched by `names/` names (the name in place of the key).
#[pyfunction]
#[pyo3(signature = (a, b, exact = false, same = false, names = false))]
fn diff<'py>(
    py: Python<'py>,
    a: PathBuf,
    b: PathBuf,
    exact: bool,
    same: bool,
    names: bool,
) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let lines = py
        .detach(|| crate::model::diff::lines(&a, &b, exact, same, names))
        .map_err(TfmountError::new_err)?;
    lines
        .into_iter()
        .map(|(tag, key)| Ok((tag, model::key_object(py, &key)?)))
        .collect()
}

/// The `tfmount` command: runs the command line `argv` as the binary does and ends the process
/// with its exit status (stdout flushed), as the binary's `main` does.
#[pyfunction]
fn main(argv: Vec<std::ffi::OsString>) {
    let code = crate::run_command_line(argv);
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    std::process::exit(code);
}

/// The crate's version (Cargo.toml's), as `tfmount --version` prints it.
#[pyfunction]
fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// Bytes of `s` as the core takes keys and paths: `str` as UTF-8, `bytes` as they are.
pub(crate) fn bytes_of(s: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(b) = s.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    let s: String = s.extract()?;
    Ok(s.into_bytes())
}

#[pymodule]
fn _tfmount(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_class::<model::Model>()?;
    m.add_class::<arrays::Mapped>()?;
    m.add("Error", m.py().get_type::<TfmountError>())?;
    m.add("IntegrityError", m.py().get_type::<IntegrityError>())?;
    Ok(())
}
