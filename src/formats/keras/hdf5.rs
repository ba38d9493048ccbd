//! An index of an HDF5 file's datasets (what Keras and h5py write), over the `hdf5-reader`
//! crate (pure Rust; chosen by fuzzing, see docs/development.md#hdf5). The crate parses the
//! metadata through a [`ReadAt`]; tfmount serves contiguous data itself, by offset, so the crate
//! reads only metadata (and the data of compact and chunked datasets, decoded whole, bounded).
//!
//! Limits: object headers up to [`MAX_HEADER`] bytes, groups [`MAX_DEPTH`] deep, [`MAX_OBJECTS`]
//! objects in all, no read of the crate's larger than asked for by the caller, no allocation
//! sized by a length the file claims beyond the file's size.
//!
//! Checks the crate does not make, so that a damaged file is not read differently from how the
//! HDF5 library (h5py) reads it (tests/formats/keras_hostile.rs compares the two on thousands of damaged
//! files): a symbol-table group's local heap (its free list, as the library checks it on
//! loading: a heap whose data address moved names every member wrongly) and the order of its
//! names (the library finds names by binary search); member names non-empty and without `/`;
//! each variable-length string attribute exactly the global heap object its reference names,
//! of the length it says. A group failing them is left out (listed in [`Index::damaged`]), the
//! rest of the file served.
//!
//! Dtypes: IEEE floats of 2, 4, 8 bytes; integers of 1, 2, 4, 8 bytes; h5py's bool (an enum of
//! one byte, `FALSE` = 0, `TRUE` = 1); opaque values whose dataset attribute `dtype` names a
//! TensorFlow dtype of that size (Keras writes bfloat16 and float8 so). Anything else (strings,
//! compounds, opaque values without a `dtype` attribute, as Keras 3's legacy saver writes
//! bfloat16) is listed in [`Index::skipped`] with the reason, not served.

use std::collections::HashSet;
use std::sync::Arc;

use hdf5_reader::global_heap::GlobalHeapCollection;
use hdf5_reader::group::Group;
use hdf5_reader::messages::attribute::AttributeMessage;
use hdf5_reader::messages::layout::DataLayout;
use hdf5_reader::messages::HdfMessage;
use hdf5_reader::storage::{Storage, StorageBuffer};
use hdf5_reader::{Datatype, Hdf5File, OpenOptions};

/// HDF5's metadata checksum (Jenkins' lookup3 with an initial value of 0), for tools that
/// repair the checksums of deliberately damaged files (the `keras` fuzz target, the hostile
/// tests) so that the damage reaches the parsers behind them.
#[cfg(any(test, feature = "testkit"))]
pub(crate) fn metadata_checksum(b: &[u8]) -> u32 {
    hdf5_reader::checksum::jenkins_lookup3(b)
}

use crate::parse::dtype::DType;
use crate::parse::{FormatError, ReadAt, Result};

/// Largest object header parsed (Keras writes a few hundred bytes).
pub(crate) const MAX_HEADER: usize = 1 << 20;
/// Deepest group nesting walked.
pub(crate) const MAX_DEPTH: usize = 64;
/// Most groups and datasets walked in one file.
pub(crate) const MAX_OBJECTS: usize = 1 << 20;

fn err(e: impl std::fmt::Display) -> FormatError {
    FormatError::Format(format!("HDF5: {e}"))
}

/// A [`ReadAt`] as the crate's storage. Every read is checked against the length first.
struct Adapter(Arc<dyn ReadAt + Send + Sync>);

impl Storage for Adapter {
    fn len(&self) -> u64 {
        self.0.len()
    }

    fn read_range(&self, offset: u64, len: usize) -> hdf5_reader::error::Result<StorageBuffer> {
        let fits = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= self.0.len());
        if !fits {
            return Err(hdf5_reader::error::Error::UnexpectedEof {
                offset,
                needed: len as u64,
                available: self.0.len().saturating_sub(offset),
            });
        }
        let mut v = vec![0u8; len];
        self.0
            .read_exact_at(&mut v, offset)
            .map_err(|e| hdf5_reader::error::Error::Io(std::io::Error::other(e.to_string())))?;
        Ok(StorageBuffer::from_vec(v))
    }
}

/// Where a dataset's bytes are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    /// In one piece at this byte offset of the file (absolute), `size` bytes.
    Contiguous { offset: u64, size: u64 },
    /// In the object header (small datasets of other writers): decoded by [`Index::read_whole`].
    Compact,
    /// In chunks, maybe filtered: decoded by [`Index::read_whole`].
    Chunked,
    /// Never written: the fill value (zeros).
    Unallocated,
}

/// One dataset that can be served.
#[derive(Debug, Clone)]
pub(crate) struct DatasetInfo {
    /// Its path without the leading `/` (`layers/dense/vars/0`).
    pub(crate) path: String,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    pub(crate) layout: Layout,
    /// Stored big-endian (to be swapped to little-endian when served).
    pub(crate) big_endian: bool,
    /// Its object header's address (to decode it again).
    header: u64,
}

/// An opened HDF5 file and its datasets.
pub(crate) struct Index {
    file: Hdf5File,
    /// The bytes the file is parsed from (for the checks the crate does not make).
    src: Arc<dyn ReadAt + Send + Sync>,
    pub(crate) datasets: Vec<DatasetInfo>,
    /// Datasets not served: `(path, why)`.
    pub(crate) skipped: Vec<(String, String)>,
    /// Groups (`path/`) and datasets not served because their metadata is damaged (a subset
    /// of what is not served: unsupported dtypes are not damage): `(path, why)`.
    pub(crate) damaged: Vec<(String, String)>,
}

impl Index {
    /// Parses the file's superblock and walks its groups.
    pub(crate) fn open(src: Arc<dyn ReadAt + Send + Sync>) -> Result<Index> {
        let len = src.len();
        let options = OpenOptions::default()
            .with_chunk_cache_bytes(0)
            .with_chunk_cache_slots(1)
            .with_max_object_header_bytes(MAX_HEADER)
            .with_max_read_bytes(usize::try_from(len).unwrap_or(usize::MAX))
            .with_max_chunk_bytes(usize::try_from(len.max(1 << 20)).unwrap_or(usize::MAX));
        let file = Hdf5File::from_storage_with_options(Arc::new(Adapter(src.clone())), options)
            .map_err(err)?;
        let mut index = Index {
            file,
            src,
            datasets: Vec::new(),
            skipped: Vec::new(),
            damaged: Vec::new(),
        };
        index.walk()?;
        index.datasets.sort_by(|a, b| a.path.cmp(&b.path));
        index.datasets.dedup_by(|a, b| a.path == b.path);
        Ok(index)
    }

    /// The end-of-file address the superblock records (where a complete file ends).
    pub(crate) fn eof(&self) -> u64 {
        let sb = self.file.superblock();
        sb.base_address.saturating_add(sb.eof_address)
    }

    fn walk(&mut self) -> Result<()> {
        let root = self.file.root_group().map_err(err)?;
        let mut seen: HashSet<u64> = HashSet::new();
        let mut todo = vec![(root, String::new(), 0usize)];
        let mut objects = 0usize;
        while let Some((group, path, depth)) = todo.pop() {
            if !seen.insert(group.address()) {
                continue;
            }
            let members = group
                .members()
                .map_err(|e| e.to_string())
                .and_then(|m| self.check_members(&group, m));
            let (groups, datasets) = match members {
                Ok(m) => m,
                // The root's members are the file's: nothing to serve without them.
                Err(why) if path.is_empty() => return Err(err(why)),
                Err(why) => {
                    self.skipped.push((format!("{path}/"), why.clone()));
                    self.damaged.push((format!("{path}/"), why));
                    continue;
                }
            };
            objects = objects.saturating_add(groups.len() + datasets.len());
            if objects > MAX_OBJECTS {
                return Err(err(format!("more than {MAX_OBJECTS} groups and datasets")));
            }
            let join = |name: &str| {
                if path.is_empty() {
                    name.to_string()
                } else {
                    format!("{path}/{name}")
                }
            };
            for d in datasets {
                let p = join(d.name());
                match self.describe(&d, p.clone()) {
                    Ok(info) => self.datasets.push(info),
                    Err(Why::Unsupported(why)) => self.skipped.push((p, why)),
                    Err(Why::Damaged(why)) => {
                        self.skipped.push((p.clone(), why.clone()));
                        self.damaged.push((p, why));
                    }
                }
            }
            if depth + 1 >= MAX_DEPTH {
                if !groups.is_empty() {
                    return Err(err(format!("groups nested more than {MAX_DEPTH} deep")));
                }
                continue;
            }
            for g in groups {
                let p = join(g.name());
                todo.push((g, p, depth + 1));
            }
        }
        Ok(())
    }

    /// A group's members as the HDF5 library would list them, or why it would not: names are
    /// non-empty and hold no `/`; a symbol-table group (what Keras and h5py's defaults write)
    /// has a sound local heap (its free list inside its data block, as the library checks when
    /// it loads the heap: a heap whose data address moved gives every name the wrong string)
    /// and lists its names in strictly increasing order (the library finds a name by binary
    /// search: out of order, a name cannot be found, and its dataset cannot be opened).
    fn check_members(
        &self,
        group: &Group,
        (groups, datasets): Members,
    ) -> std::result::Result<Members, String> {
        let names = groups
            .iter()
            .map(|g| g.name())
            .chain(datasets.iter().map(|d| d.name()));
        for n in names {
            if n.is_empty() || n.contains('/') {
                return Err(format!("a member named {n:?}"));
            }
        }
        let header = self
            .file
            .get_or_parse_header(group.address())
            .map_err(|e| format!("object header: {e}"))?;
        let heap = header.messages.iter().find_map(|m| match m {
            HdfMessage::SymbolTable(st) => Some(st.heap_address),
            _ => None,
        });
        if let Some(heap) = heap {
            self.check_local_heap(heap)?;
            let sorted = |mut it: std::iter::Peekable<std::vec::IntoIter<&str>>| {
                while let (Some(a), Some(b)) = (it.next(), it.peek()) {
                    if a >= *b {
                        return false;
                    }
                }
                true
            };
            let g: Vec<&str> = groups.iter().map(|g| g.name()).collect();
            let d: Vec<&str> = datasets.iter().map(|d| d.name()).collect();
            if !sorted(g.into_iter().peekable()) || !sorted(d.into_iter().peekable()) {
                return Err("its symbol table's names are out of order".into());
            }
        }
        Ok((groups, datasets))
    }

    /// Checks a local heap (the names of a symbol-table group) as the HDF5 library does when
    /// it loads one: signature, version, its data block inside the file, and its free list
    /// (each block inside the data block, a next offset other than 0, no loop).
    fn check_local_heap(&self, addr: u64) -> std::result::Result<(), String> {
        let sb = self.file.superblock();
        let (o, l) = (usize::from(sb.offset_size), usize::from(sb.length_size));
        if !(1..=8).contains(&o) || !(1..=8).contains(&l) {
            return Err("address or length size out of range".into());
        }
        let at = |a: u64| sb.base_address.checked_add(a).ok_or("address out of range");
        let mut h = vec![0u8; 8 + 2 * l + o];
        self.src
            .read_exact_at(&mut h, at(addr)?)
            .map_err(|e| format!("local heap: {e}"))?;
        if &h[..4] != b"HEAP" || h[4] != 0 {
            return Err("bad local heap signature or version".into());
        }
        let uint = |b: &[u8]| b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x));
        let size = uint(&h[8..8 + l]);
        let mut free = uint(&h[8 + l..8 + 2 * l]);
        let data = at(uint(&h[8 + 2 * l..8 + 2 * l + o]))?;
        if data
            .checked_add(size)
            .is_none_or(|end| end > self.src.len())
        {
            return Err("local heap data block past the end of the file".into());
        }
        const FREE_NULL: u64 = 1;
        let most = size / (2 * l as u64) + 1;
        let mut n = 0u64;
        let mut block = vec![0u8; 2 * l];
        while free != FREE_NULL {
            n += 1;
            if n > most || free.checked_add(2 * l as u64).is_none_or(|e| e > size) {
                return Err("bad local heap free list".into());
            }
            self.src
                .read_exact_at(&mut block, data + free)
                .map_err(|e| format!("local heap: {e}"))?;
            let (next, len) = (uint(&block[..l]), uint(&block[l..]));
            if next == 0 || free.checked_add(len).is_none_or(|e| e > size) {
                return Err("bad local heap free list".into());
            }
            free = next;
        }
        Ok(())
    }

    /// What a dataset is, or why it is not served.
    fn describe(
        &self,
        d: &hdf5_reader::Dataset,
        path: String,
    ) -> std::result::Result<DatasetInfo, Why> {
        let attr_dtype = || {
            let attrs = d.raw_attributes().ok()?;
            let a = attrs.iter().find(|a| a.name() == "dtype")?;
            self.strings(a.message()).ok()?.into_iter().next()
        };
        let (dtype, big_endian) = dtype_of(d.dtype(), attr_dtype).map_err(Why::Unsupported)?;
        let damaged = |why: &str| Why::Damaged(why.to_string());
        let header = self
            .file
            .get_or_parse_header(d.address())
            .map_err(|e| Why::Damaged(format!("object header: {e}")))?;
        let mut layout = None;
        let mut external = false;
        for m in &header.messages {
            match m {
                HdfMessage::DataLayout(l) => layout = Some(l.layout.clone()),
                HdfMessage::ExternalFiles(_) => external = true,
                _ => {}
            }
        }
        if external {
            return Err(Why::Unsupported("its data is in external files".into()));
        }
        let base = self.file.superblock().base_address;
        let layout = match layout.ok_or_else(|| damaged("no data layout message"))? {
            DataLayout::Contiguous { address, size } => {
                if address == u64::MAX {
                    Layout::Unallocated
                } else {
                    Layout::Contiguous {
                        offset: base
                            .checked_add(address)
                            .ok_or_else(|| damaged("address out of range"))?,
                        size,
                    }
                }
            }
            DataLayout::Compact { .. } => Layout::Compact,
            DataLayout::Chunked { .. } => Layout::Chunked,
        };
        Ok(DatasetInfo {
            path,
            dtype,
            shape: d.shape().to_vec(),
            layout,
            big_endian,
            header: d.address(),
        })
    }

    /// A compact or chunked dataset's bytes, decoded (filters applied, Fletcher-32 checked),
    /// refused above `max` bytes before anything is allocated.
    pub(crate) fn read_whole(&self, d: &DatasetInfo, max: u64) -> Result<Vec<u8>> {
        let es = d
            .dtype
            .elem_size()
            .ok_or_else(|| err("dtype without an element size"))? as u64;
        let want = d
            .shape
            .iter()
            .try_fold(es, |a, &n| a.checked_mul(n))
            .filter(|&n| n <= max)
            .ok_or_else(|| {
                err(format!(
                    "larger than the {max}-byte limit for decoded datasets"
                ))
            })?;
        let header = self.file.get_or_parse_header(d.header).map_err(err)?;
        let _ = header;
        let ds = self.file.dataset(&format!("/{}", d.path)).map_err(err)?;
        let b = ds.read_raw_bytes().map_err(err)?;
        if b.len() as u64 != want {
            return Err(err(format!(
                "{} bytes decoded, its shape and dtype need {want}",
                b.len()
            )));
        }
        Ok(b)
    }

    /// The string value of attribute `name` of the object at `path` (`""`: the root group):
    /// a scalar string, or the first of an array.
    pub(crate) fn attr_string(&self, path: &str, name: &str) -> Option<String> {
        self.attr_strings(path, name)?.into_iter().next()
    }

    /// The string values of attribute `name` of the group at `path` (`""`: the root group).
    pub(crate) fn attr_strings(&self, path: &str, name: &str) -> Option<Vec<String>> {
        let g = if path.is_empty() {
            self.file.root_group().ok()?
        } else {
            self.file.group(&format!("/{path}")).ok()?
        };
        let attrs = g.raw_attributes().ok()?;
        let a = attrs.iter().find(|a| a.name() == name)?;
        self.strings(a.message()).ok()
    }

    /// The values of a string attribute, checked as the HDF5 library checks them: fixed-length
    /// strings cut at their padding; variable-length ones each exactly the global heap object
    /// its reference names (the object of that index, once in its collection, of the length
    /// the reference says: the crate itself takes whatever object it finds, of any length).
    /// Strings must be UTF-8.
    fn strings(&self, a: &AttributeMessage) -> std::result::Result<Vec<String>, String> {
        use hdf5_reader::{StringPadding, StringSize, VarLenKind};
        let n = a.dataspace.num_elements().map_err(|e| e.to_string())?;
        let n = usize::try_from(n).map_err(|_| "too many strings".to_string())?;
        let utf8 = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|e| e.to_string());
        let raw = &a.raw_data;
        let variable = match &a.datatype {
            Datatype::String {
                size: StringSize::Fixed(len),
                padding,
                ..
            } => {
                let len = *len as usize;
                if len == 0 || n.checked_mul(len).is_none_or(|t| t > raw.len()) {
                    return Err("string attribute shorter than its strings".into());
                }
                return raw
                    .chunks_exact(len)
                    .take(n)
                    .map(|b| {
                        let end = match padding {
                            StringPadding::NullTerminate => {
                                b.iter().position(|&x| x == 0).unwrap_or(b.len())
                            }
                            StringPadding::NullPad => {
                                b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1)
                            }
                            StringPadding::SpacePad => {
                                b.iter().rposition(|&x| x != b' ').map_or(0, |i| i + 1)
                            }
                        };
                        utf8(&b[..end])
                    })
                    .collect();
            }
            Datatype::String {
                size: StringSize::Variable,
                ..
            } => true,
            Datatype::VarLen {
                kind: VarLenKind::String,
                base,
                ..
            } => base.is_vlen_string_base(),
            _ => false,
        };
        if !variable {
            return Err("not a string attribute".into());
        }
        let sb = self.file.superblock();
        let o = usize::from(sb.offset_size);
        let r = 4 + o + 4;
        if !(1..=8).contains(&o) || n.checked_mul(r).is_none_or(|t| t > raw.len()) {
            return Err("string attribute shorter than its references".into());
        }
        let uint = |b: &[u8]| b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x));
        let adapter = Adapter(self.src.clone());
        let mut collections: Vec<(u64, GlobalHeapCollection)> = Vec::new();
        let mut out = Vec::with_capacity(n);
        for e in raw.chunks_exact(r).take(n) {
            let len = uint(&e[..4]);
            let addr = uint(&e[4..4 + o]);
            let index = uint(&e[4 + o..]);
            let undefined = o == 8 && addr == u64::MAX || o < 8 && addr == (1u64 << (8 * o)) - 1;
            if undefined || index == 0 {
                if len != 0 {
                    return Err("a string of no heap object with a length".into());
                }
                out.push(String::new());
                continue;
            }
            let index = u16::try_from(index).map_err(|_| "global heap index out of range")?;
            let pos = match collections.iter().position(|(a, _)| *a == addr) {
                Some(p) => p,
                None => {
                    let at = sb
                        .base_address
                        .checked_add(addr)
                        .ok_or("address out of range")?;
                    let c = GlobalHeapCollection::parse_at_storage(
                        &adapter,
                        at,
                        sb.offset_size,
                        sb.length_size,
                    )
                    .map_err(|e| format!("global heap: {e}"))?;
                    collections.push((addr, c));
                    collections.len() - 1
                }
            };
            let mut found = collections[pos]
                .1
                .objects
                .iter()
                .filter(|x| x.index == index);
            let (Some(obj), None) = (found.next(), found.next()) else {
                return Err(format!("global heap object {index} missing or repeated"));
            };
            if obj.data.len() as u64 != len {
                return Err(format!(
                    "global heap object {index} holds {} bytes, the string {len}",
                    obj.data.len()
                ));
            }
            let end = obj
                .data
                .iter()
                .position(|&x| x == 0)
                .unwrap_or(obj.data.len());
            out.push(utf8(&obj.data[..end])?);
        }
        Ok(out)
    }
}

/// A group's member groups and datasets.
type Members = (Vec<Group>, Vec<hdf5_reader::Dataset>);

/// Why a dataset is not served.
enum Why {
    /// What it holds is not served (strings, compounds, ...).
    Unsupported(String),
    /// Its metadata is damaged.
    Damaged(String),
}

/// A dataset's dtype: from its HDF5 type, or from its `dtype` attribute where HDF5 has none.
fn dtype_of(
    t: &Datatype,
    attr: impl Fn() -> Option<String>,
) -> std::result::Result<(DType, bool), String> {
    use hdf5_reader::ByteOrder;
    let name = |n: &str| DType::from_name(n).ok_or_else(|| format!("no dtype {n}"));
    match t {
        Datatype::FloatingPoint { size, byte_order } => {
            let n = match size {
                2 => "float16",
                4 => "float32",
                8 => "float64",
                s => return Err(format!("{s}-byte floats")),
            };
            Ok((name(n)?, *byte_order == ByteOrder::BigEndian))
        }
        Datatype::FixedPoint {
            size,
            signed,
            byte_order,
        } => {
            let n = match (size, signed) {
                (1, true) => "int8",
                (2, true) => "int16",
                (4, true) => "int32",
                (8, true) => "int64",
                (1, false) => "uint8",
                (2, false) => "uint16",
                (4, false) => "uint32",
                (8, false) => "uint64",
                (s, _) => return Err(format!("{s}-byte integers")),
            };
            Ok((name(n)?, *byte_order == ByteOrder::BigEndian))
        }
        Datatype::Enum { base, members } => {
            let is_bool = matches!(**base, Datatype::FixedPoint { size: 1, .. })
                && members.len() == 2
                && members.iter().any(|m| m.name == "FALSE" && m.value == [0])
                && members.iter().any(|m| m.name == "TRUE" && m.value == [1]);
            if is_bool {
                Ok((name("bool")?, false))
            } else {
                Err("an enum type other than h5py's bool".into())
            }
        }
        Datatype::Opaque { size, .. } => {
            let Some(n) = attr() else {
                return Err(format!(
                    "opaque {size}-byte values without a dtype attribute (what they hold is not said)"
                ));
            };
            let d = DType::from_name(&n).ok_or_else(|| format!("opaque values of dtype {n:?}"))?;
            if d.elem_size() != Some(*size as usize) {
                return Err(format!("opaque {size}-byte values said to be {n}"));
            }
            Ok((d, false))
        }
        other => Err(format!("HDF5 type {}", type_name(other))),
    }
}

fn type_name(t: &Datatype) -> &'static str {
    match t {
        Datatype::FixedPoint { .. } => "integer",
        Datatype::FloatingPoint { .. } => "float",
        Datatype::String { .. } => "string",
        Datatype::Compound { .. } => "compound",
        Datatype::Array { .. } => "array",
        Datatype::Enum { .. } => "enum",
        Datatype::VarLen { .. } => "variable-length",
        Datatype::Opaque { .. } => "opaque",
        Datatype::Reference { .. } => "reference",
        Datatype::Bitfield { .. } => "bitfield",
    }
}
