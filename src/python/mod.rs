//! Adapter: the Python module `tfmount._tfmount` (feature `python`; the wheel's `import
//! tfmount` wraps it in `python/tfmount/`). The same core the mount and the subcommands use,
//! without a kernel: a [`model::Model`] is the tree a mount shows (over [`crate::fs::Fs`], as
//! `model/open.rs`'s `Tree`) and the model's checkpoint, whose tensors it hands out as numpy
//! arrays ([`arrays`]: views of a mapping of the source file where the bytes lie there as
//! served, decoded copies otherwise); `verify` and `diff` are the subcommands' own engines,
//! their lines kept instead of printed; `export` and `save` (numpy arrays in, [`saving`]) write
//! through the engines' writers; `main` is the command line itself.
//!
//! Reads run with the GIL released. Errors are Python exceptions with the CLI's words
//! ([`errors`]).

mod arrays;
mod errors;
mod model;
mod saving;

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

/// `tfmount export SOURCE OUT`: `edits` are `(kind, value)` pairs in the order given (`keep`,
/// `drop`, `rename`, `cast`, `set` with their command-line values, `weights_only` with any);
/// returns the summary and the plan's lines.
#[pyfunction]
#[pyo3(signature = (source, out, edits, to = None, shard_size = None, force = false, dry_run = false, no_object_graph = false, variables_from = None, names = false))]
#[allow(clippy::too_many_arguments)]
fn export<'py>(
    py: Python<'py>,
    source: PathBuf,
    out: PathBuf,
    edits: Vec<(String, String)>,
    to: Option<String>,
    shard_size: Option<u64>,
    force: bool,
    dry_run: bool,
    no_object_graph: bool,
    variables_from: Option<PathBuf>,
    names: bool,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use crate::model::export::{export, Edit, Glob, Options, To};
    let edits = edits
        .iter()
        .map(|(kind, v)| match kind.as_str() {
            "keep" => Glob::new(v).map(Edit::Keep),
            "drop" => Glob::new(v).map(Edit::Drop),
            "weights_only" => Ok(Edit::WeightsOnly),
            "rename" => Edit::rename(v),
            "cast" => Edit::cast(v),
            "set" => Edit::set(v),
            k => Err(format!(
                "export: no edit {k:?} (keep, drop, weights_only, rename, cast, set)"
            )),
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    let to = match to.as_deref() {
        None => None,
        Some(t) => Some(
            [To::Tf, To::Safetensors, To::SavedModel]
                .into_iter()
                .find(|k| k.name() == t)
                .ok_or_else(|| {
                    pyo3::exceptions::PyValueError::new_err(format!(
                        "export: to={t:?}: tf, safetensors or savedmodel"
                    ))
                })?,
        ),
    };
    let opts = Options {
        to,
        shard_size,
        force,
        dry_run,
        no_object_graph,
        variables_from,
        by_names: names,
        edits,
    };
    let mut plan = Vec::new();
    let summary = py
        .detach(|| export(&source, &out, &opts, &mut |s| plan.push(s.line())))
        .map_err(TfmountError::new_err)?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("to", summary.to.name())?;
    d.set_item("out", summary.out)?;
    d.set_item("tensors", summary.tensors)?;
    d.set_item("bytes", summary.bytes)?;
    d.set_item("dropped", summary.dropped)?;
    d.set_item("renamed", summary.renamed)?;
    d.set_item("files", summary.files)?;
    d.set_item("dry_run", summary.dry_run)?;
    d.set_item("plan", plan)?;
    Ok(d)
}

/// `tfmount.save`: `items` are `(key, kind, name, shape, array, shown)` (`kind`/`name`: how
/// numpy holds the dtype, [`saving::dtype_of`]; `shown`: numpy's name of it, for messages),
/// `prepare(array)` gives what is written of one ([`saving::Arrays`]); returns the summary.
#[pyfunction]
#[pyo3(signature = (items, out, prepare, format = None, shard_size = None, force = false))]
fn save<'py>(
    py: Python<'py>,
    items: Vec<saving::Item>,
    out: PathBuf,
    prepare: Py<PyAny>,
    format: Option<String>,
    shard_size: Option<u64>,
    force: bool,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use crate::model::save::{Format, Options, Tensor};
    use pyo3::exceptions::{PyTypeError, PyValueError};
    let format = match format.as_deref() {
        None => Format::default_for(&out),
        Some(f) => Format::from_name(f).ok_or_else(|| {
            PyValueError::new_err(format!("save: format={f:?}: \"tf\" or \"safetensors\""))
        })?,
    };
    match shard_size {
        Some(_) if format == Format::Safetensors => {
            return Err(PyValueError::new_err(
                "save: shard_size is for format=\"tf\" (a .safetensors file is one file)",
            ))
        }
        Some(0) => return Err(PyValueError::new_err("save: shard_size must be at least 1")),
        _ => {}
    }
    let mut tensors = Vec::with_capacity(items.len());
    let mut arrays = saving::Arrays {
        arrays: Vec::with_capacity(items.len()),
        prepare,
        err: None,
    };
    for (key, kind, name, shape, array, shown) in items {
        let dtype = saving::dtype_of(&kind, &name).ok_or_else(|| {
            PyTypeError::new_err(format!(
                "{key}: dtype {shown} has no TensorFlow dtype with the same bytes (tfmount.save \
                 writes bool, int8..int64, uint8..uint64, float16, float32, float64, complex64, \
                 complex128, ml_dtypes' bfloat16, float8_e5m2, float8_e4m3fn, float8_e4m3fnuz, \
                 float8_e4m3b11fnuz, float8_e5m2fnuz, int4, uint4, int2, uint2, float4_e2m1fn, \
                 and strings: bytes or str)"
            ))
        })?;
        arrays.arrays.push(array);
        tensors.push(Tensor { key, dtype, shape });
    }
    let opts = Options {
        format: Some(format),
        shard_size,
        force,
    };
    let r = py.detach(|| crate::model::save::save(&out, &tensors, &mut arrays, &opts));
    let summary = r.map_err(|e| saving::error(py, e, arrays.err.take()))?;
    let d = pyo3::types::PyDict::new(py);
    d.set_item("format", summary.format.name())?;
    d.set_item("to", summary.format.name())?;
    d.set_item("out", summary.out)?;
    d.set_item("tensors", summary.tensors)?;
    d.set_item("bytes", summary.bytes)?;
    d.set_item("files", summary.files)?;
    Ok(d)
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
    m.add_function(wrap_pyfunction!(export, m)?)?;
    m.add_function(wrap_pyfunction!(save, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_class::<model::Model>()?;
    m.add_class::<arrays::Mapped>()?;
    m.add("Error", m.py().get_type::<TfmountError>())?;
    m.add("IntegrityError", m.py().get_type::<IntegrityError>())?;
    Ok(())
}
