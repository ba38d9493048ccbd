//! `tfmount.save`'s glue: numpy arrays as the [`crate::model::save`] engine's tensors. The
//! Python side (`python/tfmount/__init__.py`) hands over each value as an array with how numpy
//! holds its dtype (`("numpy", descr)`, `("ml_dtypes", name)`, `("string", "")`: the reverse of
//! [`super::arrays::numpy_dtype`]) and a `prepare` function; the engine runs with the GIL
//! released and asks for one tensor at a time, in the order written: the GIL is taken to call
//! `prepare` (a C-contiguous little-endian array, the value itself when it already is one; a
//! string tensor's elements as a list of `bytes`), then released while its buffer is copied
//! into the writer a chunk at a time. At most one converted copy is alive at once.
//!
//! The arrays are read without the GIL and without a copy of their own: one changed by another
//! thread during `save` is written with whatever bytes the copy saw (the file is still whole and
//! checked: the CRC-32C is computed from the bytes as they went out).

use pyo3::exceptions::{PyException, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::model::save::Source;
use crate::parse::dtype::{DType, Elem, DT_STRING};

/// Bytes copied out of an array's buffer at a time.
const CHUNK: usize = 1 << 20;

/// The TF dtype with the bytes of numpy's `(kind, name)` (see the module's docs); `None` when
/// there is none.
pub(crate) fn dtype_of(kind: &str, name: &str) -> Option<DType> {
    match kind {
        "string" => Some(DT_STRING),
        // numpy's own: a little-endian (or byte-order-free) descr of the table's.
        "numpy" => name
            .strip_prefix('<')
            .or_else(|| name.strip_prefix('|'))
            .and_then(DType::from_npy_code),
        // ml_dtypes names these as TensorFlow does; ml_dtypes' others (float8_e4m3,
        // float8_e3m4, float6_*, ...) TensorFlow has not.
        "ml_dtypes" => DType::from_name(name).filter(|d| {
            matches!(
                d.elem(),
                Some(Elem::BF16 | Elem::Float8(_) | Elem::SubByte { .. } | Elem::Float4E2M1FN)
            )
        }),
        _ => None,
    }
}

/// One value of `tfmount.save`'s mapping as the Python side hands it over: `(key, kind, name,
/// shape, array, shown)` (`kind`/`name`: how numpy holds its dtype; `shown`: numpy's name of
/// the dtype, for messages).
pub(crate) type Item = (String, String, String, Vec<u64>, Py<PyAny>, String);

/// The arrays of one `save`, handed to the engine one at a time.
pub(crate) struct Arrays {
    pub(crate) arrays: Vec<Py<PyAny>>,
    pub(crate) prepare: Py<PyAny>,
    /// The Python exception that stopped the engine, raised in place of its words.
    pub(crate) err: Option<PyErr>,
}

impl Arrays {
    /// `prepare(array)` with the GIL held, Ctrl-C looked at first; a Python exception is kept
    /// (to be raised) and returned in words.
    fn prepared<T>(
        &mut self,
        i: usize,
        then: impl FnOnce(Bound<'_, PyAny>) -> PyResult<T>,
    ) -> Result<T, String> {
        let r = Python::attach(|py| {
            py.check_signals()?;
            let v = self.prepare.bind(py).call1((self.arrays[i].bind(py),))?;
            then(v)
        });
        r.map_err(|e| {
            let words = e.to_string();
            self.err = Some(e);
            words
        })
    }
}

impl Source for Arrays {
    fn bytes(
        &mut self,
        i: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let (keep, ptr, len) = self.prepared(i, |v| {
            let ai = v.getattr("__array_interface__")?;
            if !ai.get_item("strides")?.is_none() {
                return Err(PyTypeError::new_err(
                    "prepared array is not C-contiguous (a bug of tfmount.save)",
                ));
            }
            let len: usize = v.getattr("nbytes")?.extract()?;
            let data = ai.get_item("data")?;
            let ptr: usize = if len == 0 || data.is_none() {
                0
            } else {
                data.get_item(0)?.extract()?
            };
            Ok((v.unbind(), ptr, len))
        })?;
        let mut r = Ok(());
        if len > 0 {
            let mut buf = vec![0u8; len.min(CHUNK)];
            let mut at = 0usize;
            while at < len {
                let n = (len - at).min(CHUNK);
                // SAFETY: `[ptr, ptr + len)` is the buffer of a C-contiguous array that `keep`
                // holds alive (numpy does not move or free the buffer of an array that is
                // referenced). It is copied, never borrowed: a thread writing into it meanwhile
                // (undefined for the caller, docs/python.md) changes only which bytes are copied.
                unsafe {
                    std::ptr::copy_nonoverlapping((ptr + at) as *const u8, buf.as_mut_ptr(), n);
                }
                if let Err(e) = sink(&buf[..n]) {
                    r = Err(e);
                    break;
                }
                at += n;
            }
        }
        Python::attach(|_| drop(keep));
        r
    }

    fn strings(&mut self, i: usize) -> Result<Vec<Vec<u8>>, String> {
        self.prepared(i, |v| {
            let list = v.cast::<PyList>()?;
            let mut out = Vec::with_capacity(list.len());
            for x in list.iter() {
                out.push(x.cast::<PyBytes>()?.as_bytes().to_vec());
            }
            Ok(out)
        })
    }
}

/// The exception for the engine's error `msg`: a Python exception that stopped it as itself
/// when it is not an `Exception` (Ctrl-C), else `tfmount.Error` naming the key, caused by it.
pub(crate) fn error(py: Python<'_>, msg: String, cause: Option<PyErr>) -> PyErr {
    let e = super::errors::TfmountError::new_err(msg);
    match cause {
        Some(c) if !c.is_instance_of::<PyException>(py) => c,
        Some(c) => {
            e.set_cause(py, Some(c));
            e
        }
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_dtypes_map_to_tf_by_their_bytes() {
        let name = |k, n| dtype_of(k, n).map(|d| d.display_name());
        assert_eq!(name("numpy", "<f4").as_deref(), Some("float32"));
        assert_eq!(name("numpy", "<f2").as_deref(), Some("float16"));
        assert_eq!(name("numpy", "|b1").as_deref(), Some("bool"));
        assert_eq!(name("numpy", "|u1").as_deref(), Some("uint8"));
        assert_eq!(name("numpy", "<c16").as_deref(), Some("complex128"));
        assert_eq!(name("numpy", ">f4"), None);
        assert_eq!(name("numpy", "<M8[ns]"), None);
        assert_eq!(name("numpy", "<f16"), None);
        assert_eq!(name("numpy", "|V2"), None);
        assert_eq!(name("ml_dtypes", "bfloat16").as_deref(), Some("bfloat16"));
        assert_eq!(name("ml_dtypes", "int4").as_deref(), Some("int4"));
        assert_eq!(
            name("ml_dtypes", "float8_e4m3fn").as_deref(),
            Some("float8_e4m3fn")
        );
        assert_eq!(name("ml_dtypes", "float8_e4m3"), None);
        assert_eq!(name("ml_dtypes", "float32"), None);
        assert_eq!(name("string", "").as_deref(), Some("string"));
    }
}
