//! Tensors as numpy arrays, two ways:
//!
//! - **in place**: a tensor whose `.bin` lies verbatim in a local source file
//!   ([`crate::formats::tensors::TensorData::in_place`]) is handed out as a [`Mapped`]: a range
//!   of a read-only shared mapping of that file, which numpy takes through
//!   `__array_interface__` without copying (the array's base keeps the mapping alive, so
//!   arrays outlive `close()`). Each file is mapped once per model. The stored checksum is
//!   checked over the mapped bytes the first time the tensor is asked for
//!   ([`crate::formats::tensors::TensorData::check_in_place`]);
//! - **decoded**: everything else is read through the core (as a mount's reads are: checked,
//!   reassembled, decoded) into a `bytearray` the array owns.
//!
//! The Python side (`python/tfmount/__init__.py`) gives the bytes their dtype and shape.

use crate::sync::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use memmap2::Mmap;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList};

use crate::error::FsError;
use crate::formats::tensors::TensorData;
use crate::parse::dtype::{DType, Elem};
use crate::parse::FormatError;

/// Bytes read at a time when a tensor is decoded into an owned array.
const READ_CHUNK: u64 = 8 << 20;

/// A range of a mapped source file, as numpy's array interface (read-only).
#[pyclass(module = "tfmount._tfmount", frozen)]
pub(crate) struct Mapped {
    map: Arc<Mmap>,
    offset: usize,
    len: usize,
}

#[pymethods]
impl Mapped {
    #[getter(__array_interface__)]
    fn array_interface<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (self.len,))?;
        d.set_item("typestr", "|u1")?;
        let ptr = self.map.as_ptr() as usize + self.offset;
        // (address, read-only)
        d.set_item("data", (ptr, true))?;
        Ok(d)
    }

    fn __len__(&self) -> usize {
        self.len
    }
}

/// The mappings of a model's source files, by device and inode.
#[derive(Default)]
pub(crate) struct Maps {
    files: Mutex<HashMap<(u64, u64), Arc<Mmap>>>,
}

impl Maps {
    /// The tensor's `.bin` as a range of a mapped file, if it lies verbatim in a local one that
    /// still holds it.
    pub(crate) fn in_place(
        &self,
        data: &dyn TensorData,
        what: &str,
    ) -> Result<Option<Mapped>, FsError> {
        let Some(at) = data.in_place() else {
            return Ok(None);
        };
        let Some((file, opened_len)) = at.file.local_file() else {
            return Ok(None);
        };
        let len = data.size();
        let end = at.offset.saturating_add(len);
        let name = at.file.name().display().to_string();
        let meta = file.metadata().map_err(FsError::Io)?;
        // A file shortened since it was opened: a mapping past its end would fault when read
        // (SIGBUS), so this is refused here, as a read of it would fail.
        if end > opened_len || end > meta.len() {
            return Err(FsError::corrupt(
                what.to_string(),
                &name,
                FormatError::BadEntry(format!(
                    "the file is {} bytes long, the tensor ends at byte {end}",
                    meta.len().min(opened_len)
                )),
            ));
        }
        let (Ok(offset), Ok(len)) = (usize::try_from(at.offset), usize::try_from(len)) else {
            return Ok(None);
        };
        use std::os::unix::fs::MetadataExt as _;
        let id = (meta.dev(), meta.ino());
        let mut files = lock(&self.files);
        let map = match files.get(&id) {
            Some(m) if m.len() >= offset + len => m.clone(),
            _ => {
                // SAFETY: a read-only shared mapping of a file tfmount never writes. Another
                // process truncating the file while arrays of it are alive makes reading them
                // fault (SIGBUS), as with any mapped file (numpy.memmap, safetensors): the
                // writers of these formats replace files (a new file renamed into place), which
                // leaves this mapping intact. docs/python.md says so.
                let m = Arc::new(unsafe { Mmap::map(file) }.map_err(FsError::Io)?);
                files.insert(id, m.clone());
                m
            }
        };
        Ok(Some(Mapped { map, offset, len }))
    }
}

impl Mapped {
    /// The mapped bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        self.map
            .get(self.offset..self.offset + self.len)
            .unwrap_or(&[])
    }
}

/// How numpy holds a dtype: `("numpy", descr)`, `("ml_dtypes", name)` for the types numpy has
/// only through ml_dtypes, `("string", "")` for strings (object arrays of `bytes`); `Err` for
/// what is not numbers (resources, variants).
pub(crate) fn numpy_dtype(dtype: DType) -> Result<(&'static str, String), String> {
    // numpy's own dtypes: the table's `.npy` descr.
    if let Some(d) = dtype.npy_descr() {
        return Ok(("numpy", d.to_string()));
    }
    let name = dtype.display_name();
    match dtype.elem() {
        // The quantized types (qint8, ...): their integers.
        Some(Elem::Int { size, signed }) => Ok((
            "numpy",
            format!("<{}{size}", if signed { 'i' } else { 'u' }),
        )),
        // ml_dtypes calls these as TensorFlow does.
        Some(Elem::BF16 | Elem::SubByte { .. } | Elem::Float8(_) | Elem::Float4E2M1FN) => dtype
            .tf_name()
            .map(|n| ("ml_dtypes", n.to_string()))
            .ok_or_else(|| format!("dtype {name} has no numpy equivalent")),
        Some(Elem::String) => Ok(("string", String::new())),
        Some(Elem::Opaque) => Err(format!(
            "dtype {name} holds no numbers (its bytes are the file's .bin)"
        )),
        _ => Err(format!("dtype {name} has no numpy equivalent")),
    }
}

/// Physical memory in bytes (a decoded array larger than this is refused before allocating).
fn physical_memory() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages.max(0) as u64).saturating_mul(size.max(0) as u64)
}

/// The `.bin` read through the core into a new `bytearray`, the GIL released while reading.
pub(crate) fn decoded<'py>(
    py: Python<'py>,
    data: &Arc<dyn TensorData>,
    what: &str,
) -> PyResult<Bound<'py, PyByteArray>> {
    let size = data.size();
    let too_big = || {
        pyo3::exceptions::PyMemoryError::new_err(format!(
            "{what}: {size} bytes, more than this machine's memory"
        ))
    };
    if size > physical_memory() {
        return Err(too_big());
    }
    let n = usize::try_from(size).map_err(|_| too_big())?;
    PyByteArray::new_with(py, n, |buf| {
        py.detach(|| fill(&**data, buf))
            .map_err(|e| super::errors::fs_error(what, e))
    })
}

fn fill(data: &dyn TensorData, buf: &mut [u8]) -> Result<(), FsError> {
    let mut at = 0usize;
    while at < buf.len() {
        let want = (buf.len() - at).min(READ_CHUNK as usize);
        let got = data.read(at as u64, want)?;
        if got.is_empty() {
            return Err(FsError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the tensor's bytes end at byte {at} of {}", buf.len()),
            )));
        }
        let n = got.len().min(want);
        buf[at..at + n].copy_from_slice(&got[..n]);
        at += n;
    }
    Ok(())
}

/// A string tensor's elements, each `bytes`, from its `.bin` (an 8-byte little-endian length
/// and the bytes of each of its `count` elements).
pub(crate) fn strings<'py>(
    py: Python<'py>,
    data: &Arc<dyn TensorData>,
    count: u64,
    what: &str,
) -> PyResult<Bound<'py, PyList>> {
    let bin = py
        .detach(|| data.read(0, usize::try_from(data.size()).unwrap_or(usize::MAX)))
        .map_err(|e| super::errors::fs_error(what, e))?;
    let bad = |m: String| super::errors::IntegrityError::new_err(format!("{what}: {m}"));
    let list = PyList::empty(py);
    let mut at = 0usize;
    for i in 0..count {
        let len = bin
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| bad(format!("element {i}: its length lies past the data")))?;
        let body = usize::try_from(len)
            .ok()
            .and_then(|l| bin.get(at + 8..(at + 8).checked_add(l)?))
            .ok_or_else(|| bad(format!("element {i}: {len} bytes lie past the data")))?;
        list.append(PyBytes::new(py, body))?;
        at += 8 + body.len();
    }
    Ok(list)
}
