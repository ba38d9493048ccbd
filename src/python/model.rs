//! `tfmount.open(SOURCE)`'s object: the tree a mount of SOURCE shows ([`Tree`], over the same
//! [`Fs`] the FUSE adapter serves) and the checkpoint that is the model (the SOURCE's own, a
//! SavedModel's variables, a checkpoint directory's `latest`), its tensors by key.

use crate::sync::{lock, read_lock, write_lock};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple};

use crate::error::{FsError, SourceError};
use crate::formats::tensors::{TensorData, TensorSet};
use crate::fs::{Fs, Kind};
use crate::model::open::{Node, NodeKind, Tree};
use crate::probe::Probed;
use crate::python::arrays::{self, Maps};
use crate::python::bytes_of;
use crate::python::errors::{fs_error, tree_error, TfmountError};
use crate::source::bytes::file_type;

/// A key as Python sees it: `str` when it is UTF-8 (every key TensorFlow and Keras write), else
/// `bytes`.
pub(crate) fn key_object<'py>(py: Python<'py>, key: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    Ok(match std::str::from_utf8(key) {
        Ok(s) => PyString::new(py, s).into_any(),
        Err(_) => PyBytes::new(py, key).into_any(),
    })
}

/// What stands for the model's tensors.
enum Tensors {
    Set(Arc<dyn TensorSet>),
    /// A source without a checkpoint (a graph file, a SavedModel without variables): no keys.
    None,
    /// A checkpoint directory whose current checkpoint cannot be told: why.
    Unknown(String),
}

struct Inner {
    source: PathBuf,
    tree: Tree,
    tensors: Tensors,
    mmap: bool,
    maps: Maps,
    /// Positions whose in-place bytes were checked.
    checked: Mutex<HashSet<u64>>,
}

#[pyclass(module = "tfmount._tfmount", frozen)]
pub(crate) struct Model {
    inner: RwLock<Option<Arc<Inner>>>,
}

/// One tensor found by key.
struct Found {
    set: Arc<dyn TensorSet>,
    pos: u64,
    what: String,
}

impl Drop for Model {
    /// What the disk cache (`cache_dir`) still has to write, written before the model goes
    /// (a Python process may end soon after).
    fn drop(&mut self) {
        crate::source::remote::disk::flush_all(std::time::Duration::from_secs(30));
    }
}

impl Model {
    pub(crate) fn open(
        source: &Path,
        options: &[String],
        mmap: bool,
        verify: bool,
    ) -> Result<Model, SourceError> {
        let invalid = |msg: String| SourceError::Invalid {
            path: source.to_path_buf(),
            msg,
        };
        // As a mount: the object-store environment, then the options.
        let mut settings = crate::options::Settings {
            remote: crate::source::remote::RemoteConfig::from_env(),
            ..crate::options::Settings::default()
        };
        let env = crate::options::env_defaults().map_err(invalid)?;
        crate::options::apply(&mut settings, env.iter().chain(options).map(String::as_str))
            .map_err(invalid)?;
        if !verify {
            settings.fs.verify_crc = false;
        }
        // Edits are read (`edits=DIR`), never made here.
        settings.fs.edit_read_only = true;
        // A snapshot: the directory as it is now (a mount follows it; reopen to see new
        // checkpoints).
        settings.fs.live = false;
        let src = crate::probe::open(source, &settings.remote)?;
        let fs = Fs::with_store(src.store.clone(), &src.probed, &settings.fs)?;
        let tensors = model_tensors(&fs, &*src.store, &src.probed);
        Ok(Model {
            inner: RwLock::new(Some(Arc::new(Inner {
                source: source.to_path_buf(),
                tree: Tree::from_fs(fs),
                tensors,
                mmap,
                maps: Maps::default(),
                checked: Mutex::new(HashSet::new()),
            }))),
        })
    }

    fn inner(&self) -> PyResult<Arc<Inner>> {
        read_lock(&self.inner)
            .clone()
            .ok_or_else(|| pyo3::exceptions::PyValueError::new_err("the model is closed"))
    }
}

/// The checkpoint that is the model: the tree's root checkpoint, or a checkpoint directory's
/// `latest` (its only checkpoint when it has no state file).
fn model_tensors(fs: &Fs, store: &dyn crate::source::bytes::Store, probed: &Probed) -> Tensors {
    let cks = fs.checkpoints();
    if let Some((_, set)) = cks.iter().find(|(name, _)| name.is_empty()) {
        return Tensors::Set(set.clone());
    }
    let Probed::CheckpointDir {
        dir,
        checkpoints,
        latest,
    } = probed
    else {
        return Tensors::None;
    };
    let pick = match latest {
        Some(l) => Some(l.as_str()),
        None if checkpoints.len() == 1 => checkpoints.first().map(|(n, _)| n.as_str()),
        None => None,
    };
    match pick.and_then(|p| cks.iter().find(|(name, _)| name == p)) {
        Some((_, set)) => Tensors::Set(set.clone()),
        None if checkpoints.is_empty() => {
            // A TF Serving base directory says which versions are still being written.
            let what = crate::probe::serving::describe_dir(store, dir)
                .unwrap_or_else(|| "holds no checkpoint yet".into());
            Tensors::Unknown(format!("{}: {what}", dir.display()))
        }
        None => {
            let names: Vec<&str> = checkpoints.iter().map(|(n, _)| n.as_str()).collect();
            Tensors::Unknown(format!(
                "{}: no latest checkpoint; open one of: {}",
                dir.display(),
                names.join(", ")
            ))
        }
    }
}

impl Inner {
    fn set(&self) -> PyResult<Option<&Arc<dyn TensorSet>>> {
        match &self.tensors {
            Tensors::Set(s) => Ok(Some(s)),
            Tensors::None => Ok(None),
            Tensors::Unknown(why) => Err(TfmountError::new_err(why.clone())),
        }
    }

    fn what(&self, key: &[u8]) -> String {
        format!(
            "{}: tensor {}",
            self.source.display(),
            String::from_utf8_lossy(key)
        )
    }

    /// The tensor `key`, or `KeyError`.
    fn find(&self, key: &[u8]) -> PyResult<Found> {
        let missing =
            || pyo3::exceptions::PyKeyError::new_err(String::from_utf8_lossy(key).into_owned());
        let set = self.set()?.ok_or_else(missing)?;
        let what = self.what(key);
        let pos = set.seek(key).map_err(|e| fs_error(&what, e))?;
        match pos {
            Some(p) if !set.hidden(key) && set.key(p).map_err(|e| fs_error(&what, e))? == key => {
                Ok(Found {
                    set: set.clone(),
                    pos: p,
                    what,
                })
            }
            _ => Err(missing()),
        }
    }

    fn resolve(&self, path: &[u8], follow: bool) -> PyResult<Node> {
        self.tree
            .resolve(path, follow)
            .map_err(|e| tree_error(&self.path_name(path), e))
    }

    fn path_name(&self, path: &[u8]) -> String {
        format!(
            "{}: {}",
            self.source.display(),
            String::from_utf8_lossy(path)
        )
    }

    /// The tensor's bytes as a numpy-ready object: a [`arrays::Mapped`] or a `bytearray`.
    fn data_object<'py>(
        &self,
        py: Python<'py>,
        f: &Found,
        data: &Arc<dyn TensorData>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if self.mmap && data.size() > 0 {
            let mapped = py
                .detach(|| self.maps.in_place(&**data, &f.what))
                .map_err(|e| fs_error(&f.what, e))?;
            if let Some(m) = mapped {
                let first = lock(&self.checked).insert(f.pos);
                if first {
                    let r = py.detach(|| data.check_in_place(m.bytes()));
                    if let Err(e) = r {
                        lock(&self.checked).remove(&f.pos);
                        log::error!("{e}");
                        return Err(fs_error(&f.what, e));
                    }
                }
                return Ok(Bound::new(py, m)?.into_any());
            }
        }
        Ok(arrays::decoded(py, data, &f.what)?.into_any())
    }
}

fn kind_name(k: NodeKind) -> &'static str {
    match k {
        NodeKind::Dir => "directory",
        NodeKind::File => "file",
        NodeKind::Symlink => "link",
    }
}

#[pymethods]
impl Model {
    /// The model's tensor keys in `tensors.tsv`'s order.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let inner = self.inner()?;
        let Some(set) = inner.set()? else {
            return Ok(Vec::new());
        };
        let mut keys: Vec<Vec<u8>> = Vec::new();
        py.detach(|| {
            crate::formats::tensors::walk(&**set, |_, k| {
                keys.push(k.to_vec());
                Ok(true)
            })
        })
        .map_err(|e| fs_error(&inner.source.display().to_string(), e))?;
        keys.iter().map(|k| key_object(py, k)).collect()
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(k) = bytes_of(key) else {
            return Ok(false);
        };
        match self.inner()?.find(&k) {
            Ok(_) => Ok(true),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyKeyError>(key.py()) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Everything `m[key]` needs, from one lookup of the key: `(kind, name)` of the dtype as
    /// numpy holds it (see `arrays::numpy_dtype`; `tfmount.Error` for what holds no numbers),
    /// the shape, and the bytes: a mapped range, a `bytearray`, or (strings) a list of `bytes`.
    #[allow(clippy::type_complexity)]
    fn tensor<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<(&'static str, String, Bound<'py, PyTuple>, Bound<'py, PyAny>)> {
        let inner = self.inner()?;
        let f = inner.find(&bytes_of(key)?)?;
        let info = f.set.info(f.pos).map_err(|e| fs_error(&f.what, e))?;
        let (kind, name) = arrays::numpy_dtype(info.dtype)
            .map_err(|m| TfmountError::new_err(format!("{}: {m}", f.what)))?;
        let shape = PyTuple::new(py, &info.shape)?;
        let data = py
            .detach(|| f.set.open(f.pos))
            .map_err(|e| fs_error(&f.what, e))?;
        let bytes = if info.dtype.elem() == Some(crate::parse::dtype::Elem::String) {
            arrays::strings(py, &data, info.num_elements(), &f.what)?.into_any()
        } else {
            inner.data_object(py, &f, &data)?
        };
        Ok((kind, name, shape, bytes))
    }

    /// The `.dtype` file's text, without its newline.
    fn dtype(&self, key: &Bound<'_, PyAny>) -> PyResult<String> {
        let inner = self.inner()?;
        let f = inner.find(&bytes_of(key)?)?;
        let info = f.set.info(f.pos).map_err(|e| fs_error(&f.what, e))?;
        Ok(info.dtype.display_name())
    }

    fn shape<'py>(&self, py: Python<'py>, key: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyTuple>> {
        let inner = self.inner()?;
        let f = inner.find(&bytes_of(key)?)?;
        let info = f.set.info(f.pos).map_err(|e| fs_error(&f.what, e))?;
        PyTuple::new(py, info.shape)
    }

    /// The tensor files' extended attributes, without their `user.tfmount.` prefix.
    fn info<'py>(&self, py: Python<'py>, key: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.inner()?;
        let f = inner.find(&bytes_of(key)?)?;
        let info = f.set.info(f.pos).ok();
        let attrs = crate::fs::variables::tensor_xattrs(&*f.set, f.pos, info.as_ref())
            .map_err(|e| fs_error(&f.what, e))?;
        let d = PyDict::new(py);
        for (name, value) in attrs {
            let name = name.strip_prefix("user.tfmount.").unwrap_or(name);
            if name == "key" {
                d.set_item(name, key_object(py, &value)?)?;
            } else {
                d.set_item(name, String::from_utf8_lossy(&value).into_owned())?;
            }
        }
        Ok(d)
    }

    /// Names in directory `path` of the tree (symbolic links followed), in listing order.
    #[pyo3(signature = (path = None))]
    fn listdir<'py>(
        &self,
        py: Python<'py>,
        path: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let inner = self.inner()?;
        let p = path.map(bytes_of).transpose()?.unwrap_or_default();
        let node = inner.resolve(&p, true)?;
        let listed = py
            .detach(|| inner.tree.list(node))
            .map_err(|e| tree_error(&inner.path_name(&p), e))?;
        listed.iter().map(|l| key_object(py, &l.name)).collect()
    }

    /// `{"name", "size", "type", "mode", "mtime", "ino"}` of `path` (`type`: `file`,
    /// `directory` or, with `follow_symlinks=False`, `link`).
    #[pyo3(signature = (path, follow_symlinks = true))]
    fn stat<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
        follow_symlinks: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let inner = self.inner()?;
        let p = bytes_of(path)?;
        let node = inner.resolve(&p, follow_symlinks)?;
        let a = py
            .detach(|| inner.tree.fs().getattr(node.ino()))
            .map_err(|e| fs_error(&inner.path_name(&p), e))?;
        let type_bits = match a.kind {
            Kind::Dir => file_type::DIR,
            Kind::File => file_type::REG,
            Kind::Symlink => file_type::LNK,
        };
        let mtime = a
            .mtime
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let d = PyDict::new(py);
        d.set_item("name", path)?;
        d.set_item("size", a.size)?;
        d.set_item("type", kind_name(node.kind))?;
        d.set_item("mode", type_bits | u32::from(a.perm))?;
        d.set_item("mtime", mtime)?;
        d.set_item("ino", a.ino)?;
        Ok(d)
    }

    /// Bytes `[offset, offset + size)` of file `path` (to its end when `size` is negative), as
    /// a read of the mount gives them.
    #[pyo3(signature = (path, offset = 0, size = -1))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
        offset: u64,
        size: i64,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let inner = self.inner()?;
        let p = bytes_of(path)?;
        let name = inner.path_name(&p);
        let node = inner.resolve(&p, true)?;
        if node.kind == NodeKind::Dir {
            return Err(tree_error(&name, crate::model::open::TreeError::IsDir));
        }
        let bytes = py.detach(|| -> Result<Vec<u8>, FsError> {
            let fs = inner.tree.fs();
            let total = fs.open(node.ino())?.size;
            let want = if size < 0 {
                total.saturating_sub(offset)
            } else {
                size as u64
            };
            let mut out = Vec::new();
            let mut at = offset;
            let end = offset.saturating_add(want);
            while at < end {
                let n = (end - at).min(8 << 20) as usize;
                let b = fs.read(node.ino(), at, n)?;
                if b.is_empty() {
                    break;
                }
                at += b.len() as u64;
                out.extend_from_slice(&b);
            }
            Ok(out)
        });
        bytes
            .map(|b| PyBytes::new(py, &b))
            .map_err(|e| fs_error(&name, e))
    }

    /// The target of symbolic link `path`.
    fn readlink<'py>(
        &self,
        py: Python<'py>,
        path: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner()?;
        let p = bytes_of(path)?;
        let node = inner.resolve(&p, false)?;
        let t = inner
            .tree
            .readlink(node)
            .map_err(|e| tree_error(&inner.path_name(&p), e))?;
        key_object(py, &t)
    }

    /// `tfmount verify SOURCE`'s problems, `(key, reason)`.
    #[pyo3(signature = (threads = None))]
    fn verify<'py>(
        &self,
        py: Python<'py>,
        threads: Option<usize>,
    ) -> PyResult<Vec<(Bound<'py, PyAny>, String)>> {
        let inner = self.inner()?;
        let problems = py
            .detach(|| crate::model::verify::problems(&inner.source, threads))
            .map_err(TfmountError::new_err)?;
        problems
            .into_iter()
            .map(|(k, r)| Ok((key_object(py, &k)?, r)))
            .collect()
    }

    /// Closes the source's files and connections; arrays already handed out stay valid.
    fn close(&self) {
        *write_lock(&self.inner) = None;
    }

    #[getter]
    fn closed(&self) -> bool {
        read_lock(&self.inner).is_none()
    }

    #[getter]
    fn source(&self) -> PyResult<String> {
        Ok(self.inner()?.source.display().to_string())
    }
}
