//! `save`: tensors given by the caller — a key, a dtype, a shape, and their bytes on demand —
//! written as a TF V2 checkpoint or a `.safetensors` file through the writers `export` uses
//! ([`crate::formats::v2::write`], [`crate::formats::safetensors_write`]): nothing at `OUT` until
//! it is whole, every byte read back against the CRC-32C computed as it went out, temporaries
//! removed on failure. The Python module's `tfmount.save` is its adapter (numpy arrays in);
//! the engine knows no Python.
//!
//! - The TF output is a name-keyed checkpoint (TF1 style, no object graph): the keys as given,
//!   written in bytewise key order, as TensorFlow's `SaveV2` writes them; `tf.train.load_checkpoint`
//!   and `tf.compat.v1.train.init_from_checkpoint` read it.
//! - The safetensors output is the layout `model.safetensors` serves
//!   ([`crate::parse::safetensors::Layout`]), tensors in key order.
//!
//! Everything that can be refused (an empty or repeated key, a dtype the output cannot hold, a
//! shape too large, `shard_size` for safetensors) is refused before anything is created.
//! Memory: the keys and shapes, and what [`Source`] hands over for one tensor at a time.

use std::path::{Path, PathBuf};

use crate::formats::safetensors_write::SafetensorsWriter;
use crate::formats::v2::write::BundleWriter;
use crate::parse::dtype::{DType, DT_STRING};
use crate::parse::safetensors::{safetensors_dtype, Layout, TensorRecord};

/// What `save` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// A TF V2 checkpoint: `OUT.index`, `OUT.data-*`.
    Tf,
    /// One `.safetensors` file.
    Safetensors,
}

impl Format {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::Tf => "tf",
            Format::Safetensors => "safetensors",
        }
    }

    /// The format named `name` (`tf`, `safetensors`).
    pub(crate) fn from_name(name: &str) -> Option<Format> {
        [Format::Tf, Format::Safetensors]
            .into_iter()
            .find(|f| f.name() == name)
    }

    /// What is written when no format is given: safetensors for an `out` ending `.safetensors`
    /// (any case), else a TF checkpoint — as `export` decides.
    pub(crate) fn default_for(out: &Path) -> Format {
        if out
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
        {
            Format::Safetensors
        } else {
            Format::Tf
        }
    }
}

/// One tensor to write: its key, dtype and shape (its bytes come from the [`Source`]).
#[derive(Debug, Clone)]
pub(crate) struct Tensor {
    pub(crate) key: String,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
}

/// Where the tensors' contents come from, asked once per tensor, in the order written.
pub(crate) trait Source {
    /// The bytes of tensor `i` (of [`save`]'s list; a fixed-size dtype): row-major,
    /// little-endian, as tfmount's `.bin` holds them, handed to `sink` in order (any number of
    /// pieces).
    fn bytes(
        &mut self,
        i: usize,
        sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String>;

    /// The elements of string tensor `i`, row-major.
    fn strings(&mut self, i: usize) -> Result<Vec<Vec<u8>>, String>;
}

/// How to write.
#[derive(Debug, Clone, Default)]
pub(crate) struct Options {
    /// `None`: [`Format::default_for`] `out`.
    pub(crate) format: Option<Format>,
    /// TF only: bytes per data file at most (a larger tensor has a file of its own).
    pub(crate) shard_size: Option<u64>,
    /// Replace what is at `out`.
    pub(crate) force: bool,
}

/// What `save` wrote.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(crate) format: Format,
    pub(crate) out: PathBuf,
    pub(crate) tensors: u64,
    /// Tensor data bytes (TF: the data files' bytes; safetensors: the file's, header included),
    /// as `export` counts them.
    pub(crate) bytes: u64,
    pub(crate) files: Vec<PathBuf>,
}

/// Writes `tensors` to `out` as `opts` says, their contents from `src`; errors are one line
/// naming the key or the file. On any error nothing is left at `out`.
pub(crate) fn save(
    out: &Path,
    tensors: &[Tensor],
    src: &mut dyn Source,
    opts: &Options,
) -> Result<Summary, String> {
    let format = opts.format.unwrap_or_else(|| Format::default_for(out));
    check(tensors, format, opts)?;
    // Bytewise key order, as TensorFlow's SaveV2 writes.
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| tensors[a].key.as_bytes().cmp(tensors[b].key.as_bytes()));
    let (bytes, files) = match format {
        Format::Tf => write_tf(out, tensors, &order, src, opts)?,
        Format::Safetensors => write_safetensors(out, tensors, &order, src, opts.force)?,
    };
    Ok(Summary {
        format,
        out: out.to_path_buf(),
        tensors: tensors.len() as u64,
        bytes,
        files,
    })
}

/// The refusals that need no writing: keys, dtypes, sizes, options.
fn check(tensors: &[Tensor], format: Format, opts: &Options) -> Result<(), String> {
    if format == Format::Safetensors && opts.shard_size.is_some() {
        return Err("shard_size is for TF checkpoints; a .safetensors file is one file".into());
    }
    if opts.shard_size == Some(0) {
        return Err("shard_size must be at least 1 byte".into());
    }
    let mut seen = std::collections::HashSet::new();
    for t in tensors {
        let k = &t.key;
        if k.is_empty() {
            return Err(
                "a tensor's key is empty (TF checkpoints and safetensors need a name)".into(),
            );
        }
        if !seen.insert(k.as_str()) {
            return Err(format!("{k}: two tensors with this key"));
        }
        let name = t.dtype.display_name();
        let esize = if t.dtype == DT_STRING {
            None
        } else {
            Some(t.dtype.elem_size().ok_or_else(|| {
                format!(
                    "{k}: its dtype, {name}, is one tfmount cannot write (no fixed element size)"
                )
            })?)
        };
        // (A string tensor's element count, a fixed-size one's bytes.)
        t.shape
            .iter()
            .try_fold(esize.unwrap_or(1) as u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("{k}: shape {:?} too large", t.shape))?;
        if format == Format::Safetensors {
            if t.dtype == DT_STRING {
                return Err(format!(
                    "{k}: a string tensor, which safetensors cannot hold (a TF checkpoint can)"
                ));
            }
            if safetensors_dtype(t.dtype).is_none() {
                return Err(format!(
                    "{k}: its dtype, {name}, is one safetensors cannot hold (a TF checkpoint can)"
                ));
            }
            if k == "__metadata__" {
                return Err(format!("{k}: a key safetensors reserves for its metadata"));
            }
        }
    }
    Ok(())
}

/// Bytes of a tensor of a fixed-size dtype.
fn size_of(t: &Tensor) -> u64 {
    let esize = t.dtype.elem_size().unwrap_or(0) as u64;
    // `check` made sure this does not overflow.
    t.shape.iter().fold(esize, |a, &d| a.saturating_mul(d))
}

fn write_tf(
    out: &Path,
    tensors: &[Tensor],
    order: &[usize],
    src: &mut dyn Source,
    opts: &Options,
) -> Result<(u64, Vec<PathBuf>), String> {
    let mut w = BundleWriter::create(out, opts.shard_size, opts.force)?;
    for &i in order {
        let t = &tensors[i];
        let named = |e: String| format!("{}: {e}", t.key);
        if t.dtype == DT_STRING {
            let items = src.strings(i).map_err(named)?;
            let n = t.shape.iter().product::<u64>();
            if items.len() as u64 != n {
                return Err(named(format!(
                    "{} strings, its shape {:?} makes {n}",
                    items.len(),
                    t.shape
                )));
            }
            let served = Served::new(&items);
            let total = served.len();
            let mut read = |at: u64, len: usize| Ok(served.read(at, len));
            w.add_strings(t.key.as_bytes(), &t.shape, total, &mut read)
                .map_err(named)?;
        } else {
            w.add(t.key.as_bytes(), t.dtype, &t.shape, |sink| {
                src.bytes(i, sink)
            })
            .map_err(named)?;
        }
    }
    let wrote = w.finish()?;
    Ok((wrote.bytes, wrote.files))
}

fn write_safetensors(
    out: &Path,
    tensors: &[Tensor],
    order: &[usize],
    src: &mut dyn Source,
    force: bool,
) -> Result<(u64, Vec<PathBuf>), String> {
    let layout = Layout::build(order.iter().map(|&i| {
        let t = &tensors[i];
        TensorRecord {
            name: t.key.as_bytes(),
            dtype: t.dtype,
            shape: &t.shape,
            nbytes: size_of(t),
        }
    }))
    .map_err(|e| format!("{}: {e}", out.display()))?;
    let held = layout.tensors().count();
    if held != order.len() {
        // `check` refused what the layout leaves out; this is a bug if reached.
        return Err(format!(
            "{}: {} of {} tensors fit the safetensors layout",
            out.display(),
            held,
            order.len()
        ));
    }
    let mut w = SafetensorsWriter::create(out, layout.header().to_vec(), force)?;
    for (k, range) in layout.tensors() {
        let i = order[k];
        let t = &tensors[i];
        w.add(range.end - range.start, |sink| src.bytes(i, sink))
            .map_err(|e| format!("{}: {e}", t.key))?;
    }
    let (bytes, path) = w.finish()?;
    Ok((bytes, vec![path]))
}

/// A string tensor's elements in tfmount's served layout (each an 8-byte little-endian length,
/// then its bytes), read by range without being assembled.
struct Served<'a> {
    items: &'a [Vec<u8>],
    /// Where each element's length field starts, then the layout's end.
    starts: Vec<u64>,
}

impl<'a> Served<'a> {
    fn new(items: &'a [Vec<u8>]) -> Served<'a> {
        let mut starts = Vec::with_capacity(items.len() + 1);
        let mut at = 0u64;
        for s in items {
            starts.push(at);
            at += 8 + s.len() as u64;
        }
        starts.push(at);
        Served { items, starts }
    }

    fn len(&self) -> u64 {
        self.starts.last().copied().unwrap_or(0)
    }

    /// Bytes `[at, at + len)`, clipped to the end.
    fn read(&self, at: u64, len: usize) -> Vec<u8> {
        let end = at.saturating_add(len as u64).min(self.len());
        let mut out = Vec::with_capacity(end.saturating_sub(at) as usize);
        let mut pos = at;
        while pos < end {
            // The element whose piece holds `pos`.
            let k = self.starts.partition_point(|&s| s <= pos) - 1;
            let item = &self.items[k];
            let mut piece = (item.len() as u64).to_le_bytes().to_vec();
            let off = (pos - self.starts[k]) as usize;
            let stop = ((end - self.starts[k]) as usize).min(8 + item.len());
            if off < 8 {
                piece.truncate(stop.min(8));
                out.extend_from_slice(&piece[off..]);
                pos += (piece.len() - off) as u64;
            } else {
                out.extend_from_slice(&item[off - 8..stop - 8]);
                pos += (stop - off) as u64;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tensors from memory.
    struct Mem(Vec<Vec<u8>>, Vec<Vec<Vec<u8>>>);

    impl Source for Mem {
        fn bytes(
            &mut self,
            i: usize,
            sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
        ) -> Result<(), String> {
            // In two pieces, as a caller may hand them.
            let b = &self.0[i];
            let (a, z) = b.split_at(b.len() / 2);
            sink(a)?;
            sink(z)
        }
        fn strings(&mut self, i: usize) -> Result<Vec<Vec<u8>>, String> {
            Ok(self.1[i].clone())
        }
    }

    fn t(key: &str, dtype: &str, shape: &[u64]) -> Tensor {
        Tensor {
            key: key.into(),
            dtype: DType::from_name(dtype).expect("a dtype"),
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn served_layout_by_any_range() {
        let items = vec![b"ab".to_vec(), Vec::new(), b"xyz".to_vec()];
        let s = Served::new(&items);
        let mut whole = Vec::new();
        for it in &items {
            whole.extend_from_slice(&(it.len() as u64).to_le_bytes());
            whole.extend_from_slice(it);
        }
        assert_eq!(s.len(), whole.len() as u64);
        for a in 0..=whole.len() {
            for n in 0..=whole.len() + 2 {
                let want = &whole[a..(a + n).min(whole.len())];
                assert_eq!(s.read(a as u64, n), want, "{a} {n}");
            }
        }
    }

    #[test]
    fn both_formats_read_back_through_the_crate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tensors = vec![
            t("z", "float32", &[2]),
            t("a/s", "string", &[3]),
            t("m", "int8", &[]),
            t("e", "int64", &[0, 3]),
        ];
        let mut src = Mem(
            vec![
                [1f32, 2.].iter().flat_map(|v| v.to_le_bytes()).collect(),
                Vec::new(),
                vec![0xff],
                Vec::new(),
            ],
            vec![
                Vec::new(),
                vec![b"x".to_vec(), Vec::new(), "é".as_bytes().to_vec()],
                Vec::new(),
                Vec::new(),
            ],
        );
        let out = dir.path().join("ck");
        let s = save(&out, &tensors, &mut src, &Options::default()).expect("tf");
        assert_eq!(s.format, Format::Tf);
        assert_eq!(s.tensors, 4);
        assert!(crate::formats::v2::write::index_path(&out).exists());
        // Again: refused without force, nothing changed.
        let e = save(&out, &tensors, &mut src, &Options::default()).unwrap_err();
        assert!(e.contains("exists"), "{e}");
        // Safetensors: strings refused before anything is written.
        let st = dir.path().join("w.safetensors");
        let e = save(&st, &tensors, &mut src, &Options::default()).unwrap_err();
        assert!(e.starts_with("a/s: a string tensor"), "{e}");
        assert!(!st.exists());
        let numeric: Vec<Tensor> = tensors
            .iter()
            .filter(|t| t.dtype != DT_STRING)
            .cloned()
            .collect();
        let mut src2 = Mem(
            vec![src.0[0].clone(), src.0[2].clone(), src.0[3].clone()],
            vec![Vec::new(); 3],
        );
        let s = save(&st, &numeric, &mut src2, &Options::default()).expect("safetensors");
        assert_eq!(s.format, Format::Safetensors);
        let bytes = std::fs::read(&st).expect("read");
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8")) as usize;
        let json = std::str::from_utf8(&bytes[8..8 + n]).expect("utf8");
        // Key order: e, m, z.
        let (e, m, z) = (
            json.find("\"e\"").expect("e"),
            json.find("\"m\"").expect("m"),
            json.find("\"z\"").expect("z"),
        );
        assert!(e < m && m < z, "{json}");
        assert_eq!(
            &bytes[bytes.len() - 9..],
            &[0xff, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]
        );
    }

    #[test]
    fn refusals_name_the_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("x.safetensors");
        let mut src = Mem(vec![Vec::new(); 2], vec![Vec::new(); 2]);
        let cases: Vec<(Vec<Tensor>, &str)> = vec![
            (
                vec![t("q", "int4", &[2])],
                "q: its dtype, int4, is one safetensors",
            ),
            (vec![t("c", "complex128", &[1])], "c: its dtype, complex128"),
            (vec![t("__metadata__", "int8", &[1])], "__metadata__: a key"),
            (vec![t("", "int8", &[1])], "empty"),
            (vec![t("r", "resource", &[1])], "r: its dtype, resource"),
            (vec![t("d", "int8", &[1]), t("d", "int8", &[1])], "d: two"),
            (vec![t("big", "int64", &[u64::MAX, 2])], "big: shape"),
        ];
        for (ts, want) in cases {
            let e = save(&out, &ts, &mut src, &Options::default()).unwrap_err();
            assert!(e.contains(want), "{e} / {want}");
            assert!(!out.exists());
        }
        let opts = Options {
            shard_size: Some(10),
            ..Options::default()
        };
        let e = save(&out, &[], &mut src, &opts).unwrap_err();
        assert!(e.contains("shard_size"), "{e}");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
    }
}
