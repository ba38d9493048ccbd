//! What `verify` and `diff` need of a checkpoint, whatever its format: a walk of its keys in
//! order ([`Item`]s: tensors, and the entries, index blocks or files that cannot be read), each
//! tensor's stored pieces ([`Piece`]: the whole tensor, or one slice of a partitioned one), and
//! the reads that check them.
//!
//! [`Integrity`] is the interface; [`Generic`] implements it over any [`TensorSet`] (a tensor is
//! one piece, its served bytes, checked by whatever the format checks as they are read). A
//! format with more to go on (V2: a stored CRC-32C per tensor, slices under their own keys)
//! implements it itself, as the fast path of `verify` and `diff`.

use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::error::FsError;
use crate::formats::tensors;
use crate::formats::tensors::{TensorData, TensorSet};

/// What a walk over a checkpoint's keys meets, in key order.
pub enum Item {
    /// A tensor's entry, parsed.
    Tensor(Entry),
    /// An index entry that cannot be parsed.
    BadEntry { key: Vec<u8>, reason: String },
    /// An index data block that cannot be read: its number (from 0), the number of blocks, and
    /// the keys it holds, `(after, up_to]`, when the index block says.
    BadBlock {
        block: u32,
        blocks: u32,
        after: Option<Vec<u8>>,
        up_to: Option<Vec<u8>>,
        reason: String,
    },
    /// A file of a sharded checkpoint that is not there (met first, before any tensor): its
    /// number (from 0), the number of shards, its path. The tensors stored only in it are not
    /// known (each V1 shard lists only its own).
    MissingShard {
        shard: u32,
        shards: u32,
        file: PathBuf,
    },
}

/// A tensor as its index entry describes it.
#[derive(Debug, Clone)]
pub struct Entry {
    pub(crate) key: Vec<u8>,
    /// TensorFlow's dtype name (`float32`, ...; `unknown_N`).
    pub dtype: String,
    /// The dimensions.
    pub shape: Vec<u64>,
    /// Stored as slices under their own keys (see [`Integrity::pieces`]).
    pub(crate) partitioned: bool,
    /// Stored bytes (a whole tensor; 0 for a partitioned one). Formats that store values, not
    /// bytes (V1) give the served size of a fixed-width whole tensor, 0 for strings.
    pub(crate) nbytes: u64,
    /// The stored CRC-32C (unmasked) of a whole tensor, where the format keeps one.
    pub(crate) crc: Option<u32>,
    pub(crate) handle: Handle,
}

/// What a format keeps of a tensor or piece between the walk and the reads (its own type).
#[derive(Clone)]
pub(crate) struct Handle(pub Arc<dyn Any + Send + Sync>);

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Handle")
    }
}

impl Handle {
    /// The format's own handle; an error for one of another checkpoint.
    pub(crate) fn get<T: 'static>(&self) -> Result<&T, String> {
        self.0
            .downcast_ref::<T>()
            .ok_or_else(|| FOREIGN.to_string())
    }
}

/// A tensor or piece of one checkpoint given to another.
const FOREIGN: &str = "a tensor of another checkpoint";

/// One stored piece of a tensor: the whole tensor, or one slice of a partitioned one.
#[derive(Debug, Clone)]
pub struct Piece {
    /// The slice, per dimension `(start, length)`; empty for a whole tensor.
    pub(crate) extent: Vec<(u64, u64)>,
    pub(crate) nbytes: u64,
    /// Stored CRC-32C (unmasked), where the format keeps one; the caller checks it.
    pub(crate) crc: Option<u32>,
    /// The file it is stored in (for messages).
    pub(crate) file: PathBuf,
    /// Whether its bytes are checked by [`Integrity::check_piece`] (strings, variants, dtypes
    /// that cannot be read) rather than read with [`Integrity::read_piece`] and CRC-checked by
    /// the caller.
    pub(crate) checked_by_core: bool,
    pub(crate) handle: Handle,
}

/// A walk's items.
pub(crate) type Walk<'a> = Box<dyn Iterator<Item = Item> + 'a>;

/// The checks `verify` and `diff` run on one checkpoint. Errors are reasons in words, naming
/// the file.
pub trait Integrity: Send + Sync {
    /// The checkpoint's path (prefix or file).
    fn path(&self) -> &Path;
    /// The tensors in key order, with what cannot be read.
    fn walk(&self) -> Walk<'_>;
    /// The stored pieces of a tensor.
    fn pieces(&self, t: &Entry) -> Result<Vec<Piece>, String>;
    /// Checks, without reading it, that a piece's file is there and long enough.
    fn piece_present(&self, _p: &Piece) -> Result<(), String> {
        Ok(())
    }
    /// Hands stored bytes `[offset, offset + len)` of a piece (not `checked_by_core`) to `f`,
    /// unchecked where the caller checks a stored CRC; returns how many.
    fn read_piece(
        &self,
        p: &Piece,
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, String>;
    /// Where a whole tensor's served bytes lie, as they are, in a local file: `(path, offset)`,
    /// for a copy the kernel makes (`export`); `None` where they do not (a remote source, bytes
    /// decoded or converted when served, a partitioned tensor).
    fn stored_in_local_file(&self, _t: &Entry) -> Option<(PathBuf, u64)> {
        None
    }
    /// Reads a `checked_by_core` piece whole, checking it; returns the bytes read.
    fn check_piece(&self, p: &Piece) -> Result<u64, String>;
    /// Size of the tensor's served bytes (its `.bin`).
    fn served_size(&self, t: &Entry) -> Result<u64, String>;
    /// Bytes `[offset, offset + len)` of the tensor's served bytes.
    fn read_served(&self, t: &Entry, offset: u64, len: usize) -> Result<Vec<u8>, String>;
    /// Hands bytes `[offset, offset + len)` of the tensor's served bytes (fewer at the end) to
    /// `f`, without a copy where the format reads them as stored (a slice of a mapping, inside
    /// a [`crate::source::mapped::scope`]); returns how many.
    fn read_served_with(
        &self,
        t: &Entry,
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, String> {
        let b = self.read_served(t, offset, len)?;
        f(&b);
        Ok(b.len())
    }
    /// [`read_served`](Self::read_served) into `buf` (bytes `[offset, offset + buf.len())`,
    /// fewer at the end); returns how many.
    fn read_served_into(&self, t: &Entry, offset: u64, buf: &mut [u8]) -> Result<usize, String> {
        let b = self.read_served(t, offset, buf.len())?;
        let n = b.len().min(buf.len());
        buf[..n].copy_from_slice(&b[..n]);
        Ok(n)
    }
    /// Checks of whole files beyond their tensors (the CRC-32 a zip's directory holds of a
    /// member), run by `verify` after the tensors: `(what, bytes read or the problem)`.
    fn file_checks(&self) -> Vec<(Vec<u8>, Result<u64, String>)> {
        Vec::new()
    }
}

/// A check of a whole file (see [`Integrity::file_checks`]).
pub(crate) type FileCheck = Box<dyn Fn() -> (Vec<u8>, Result<u64, String>) + Send + Sync>;

/// A core error as a reason on a line that already names the tensor: the file and what is
/// wrong with it, said once (`CRC-32C mismatch in FILE (stored .., computed ..)`, `FILE: what`).
pub(crate) fn bare(e: FsError, prefix: &Path, key: &[u8]) -> String {
    let e = match e {
        FsError::Corrupt {
            file,
            source: crate::parse::FormatError::TensorCrc { stored, computed },
            ..
        } => {
            return format!(
                "CRC-32C mismatch in {file} (stored {stored:#010x}, computed {computed:#010x})"
            )
        }
        FsError::Corrupt { file, source, .. } => return format!("{file}: {source}"),
        e => e,
    };
    let s = e.to_string();
    let p = format!(
        "{}: tensor {}: ",
        prefix.display(),
        String::from_utf8_lossy(key)
    );
    match s.strip_prefix(&p) {
        Some(rest) => rest.to_string(),
        None => s,
    }
}

// ---------------------------------------------------------------------------------------------
// The generic adapter
// ---------------------------------------------------------------------------------------------

/// Bytes read at a time when a tensor is read whole.
const READ: usize = 256 << 10;

/// [`Integrity`] over any [`TensorSet`]: a tensor is one piece, its served bytes (a partitioned
/// tensor assembled by the set), checked by whatever the format checks as they are read (V1:
/// its table blocks' CRC-32C). Two tensors are compared by their bytes.
pub(crate) struct Generic {
    set: Arc<dyn TensorSet>,
    /// Items met before any tensor (files of the checkpoint that are missing).
    first: Vec<Item>,
    checks: Vec<FileCheck>,
}

/// A tensor of a [`Generic`] set: its position, and its bytes once opened (shared by the
/// tensor's [`Entry`] and its piece).
struct GenericHandle {
    pos: u64,
    key: Vec<u8>,
    data: OnceLock<Result<Arc<dyn TensorData>, String>>,
    /// The outcome of the tensor's first read, which locates it (see [`Generic::located`]).
    located: OnceLock<Result<(), String>>,
}

impl Generic {
    /// `first`: items the walk yields before any tensor.
    pub(crate) fn new(set: Arc<dyn TensorSet>, first: Vec<Item>) -> Generic {
        Generic {
            set,
            first,
            checks: Vec::new(),
        }
    }

    /// With a check of a whole file, run by `verify` after the tensors.
    pub(crate) fn with_file_check(mut self, check: FileCheck) -> Generic {
        self.checks.push(check);
        self
    }

    /// A core error as a reason: the checkpoint's path, then what failed.
    fn reason(&self, e: FsError, key: &[u8]) -> String {
        let path = self.set.path().display().to_string();
        let b = bare(e, self.set.path(), key);
        if b.starts_with(&path) {
            b
        } else {
            format!("{path}: {b}")
        }
    }

    /// The tensor's bytes, opened once.
    fn data(&self, h: &GenericHandle) -> Result<Arc<dyn TensorData>, String> {
        h.data
            .get_or_init(|| self.set.open(h.pos).map_err(|e| self.reason(e, &h.key)))
            .clone()
    }

    /// The tensor's bytes, located: its first read (of one byte) finds its entries and verifies
    /// what the format verifies there, done once, by one thread; threads reading other parts
    /// of the tensor at the same time wait for it rather than do it again. This also checks an
    /// empty tensor's entries (as TensorFlow's reader reads them), though it serves no bytes.
    fn located(&self, h: &GenericHandle) -> Result<Arc<dyn TensorData>, String> {
        let data = self.data(h)?;
        h.located
            .get_or_init(|| {
                data.read(0, 1)
                    .map(|_| ())
                    .map_err(|e| self.reason(e, &h.key))
            })
            .clone()?;
        Ok(data)
    }

    fn read(&self, h: &GenericHandle, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        self.located(h)?
            .read(offset, len)
            .map(Vec::from)
            .map_err(|e| self.reason(e, &h.key))
    }

    fn entry(&self, pos: u64, i: tensors::TensorInfo) -> Entry {
        let partitioned = !i.slices.is_empty();
        let nbytes = match (partitioned, i.dtype.elem_size()) {
            (false, Some(s)) => i.num_elements().saturating_mul(s as u64),
            _ => 0,
        };
        Entry {
            dtype: i.dtype.display_name(),
            shape: i.shape,
            partitioned,
            nbytes,
            crc: None,
            handle: Handle(Arc::new(GenericHandle {
                pos,
                key: i.key.clone(),
                data: OnceLock::new(),
                located: OnceLock::new(),
            })),
            key: i.key,
        }
    }
}

impl Integrity for Generic {
    fn path(&self) -> &Path {
        self.set.path()
    }

    fn walk(&self) -> Walk<'_> {
        Box::new(GenericWalk {
            ck: self,
            first: 0,
            state: State::Start,
        })
    }

    /// The one piece of a tensor: all of its served bytes. An empty tensor is located here: no
    /// read of its bytes will do it.
    fn pieces(&self, t: &Entry) -> Result<Vec<Piece>, String> {
        let h = t.handle.get::<GenericHandle>()?;
        let data = self.data(h)?;
        if data.size() == 0 {
            self.located(h)?;
        }
        Ok(vec![Piece {
            extent: Vec::new(),
            nbytes: data.size(),
            crc: None,
            file: self.path().to_path_buf(),
            checked_by_core: false,
            handle: t.handle.clone(),
        }])
    }

    fn read_piece(
        &self,
        p: &Piece,
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, String> {
        let b = self.read(p.handle.get::<GenericHandle>()?, offset, len)?;
        f(&b);
        Ok(b.len())
    }

    /// Reads a tensor whole (which checks it); returns its size.
    fn check_piece(&self, p: &Piece) -> Result<u64, String> {
        let h = p.handle.get::<GenericHandle>()?;
        let data = self.located(h)?;
        let size = data.size();
        let mut done = 0u64;
        while done < size {
            let n = data
                .read(done, READ)
                .map_err(|e| self.reason(e, &h.key))?
                .len();
            if n == 0 {
                return Err(format!(
                    "{}: {} bytes served, {size} expected",
                    self.path().display(),
                    done
                ));
            }
            done += n as u64;
        }
        Ok(size)
    }

    fn served_size(&self, t: &Entry) -> Result<u64, String> {
        Ok(self.data(t.handle.get::<GenericHandle>()?)?.size())
    }

    fn read_served(&self, t: &Entry, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        self.read(t.handle.get::<GenericHandle>()?, offset, len)
    }

    fn read_served_with(
        &self,
        t: &Entry,
        offset: u64,
        len: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, String> {
        let h = t.handle.get::<GenericHandle>()?;
        let b = self
            .located(h)?
            .read(offset, len)
            .map_err(|e| self.reason(e, &h.key))?;
        f(&b);
        Ok(b.len())
    }

    fn read_served_into(&self, t: &Entry, offset: u64, buf: &mut [u8]) -> Result<usize, String> {
        let h = t.handle.get::<GenericHandle>()?;
        self.located(h)?
            .read_into(offset, buf)
            .map_err(|e| self.reason(e, &h.key))
    }

    fn file_checks(&self) -> Vec<(Vec<u8>, Result<u64, String>)> {
        self.checks.iter().map(|c| c()).collect()
    }
}

enum State {
    Start,
    After(u64),
    Done,
}

/// Iterator of a generic walk: the items met first, then the tensors in key order.
struct GenericWalk<'a> {
    ck: &'a Generic,
    first: usize,
    state: State,
}

impl GenericWalk<'_> {
    /// The walk cannot go on: one item saying why, then the end.
    fn stop(&mut self, e: FsError) -> Option<Item> {
        self.state = State::Done;
        Some(Item::BadEntry {
            key: b"[tensor list]".to_vec(),
            reason: format!("{}: {e}", self.ck.path().display()),
        })
    }
}

impl Iterator for GenericWalk<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if let Some(item) = self.ck.first.get(self.first) {
            self.first += 1;
            return Some(match item {
                Item::MissingShard {
                    shard,
                    shards,
                    file,
                } => Item::MissingShard {
                    shard: *shard,
                    shards: *shards,
                    file: file.clone(),
                },
                Item::BadEntry { key, reason } => Item::BadEntry {
                    key: key.clone(),
                    reason: reason.clone(),
                },
                // Tensors and blocks are not given as first items.
                _ => return self.next(),
            });
        }
        let set = &*self.ck.set;
        loop {
            let found = match self.state {
                State::Start => set.seek(b""),
                State::After(p) => set.next(p),
                State::Done => return None,
            };
            let pos = match found {
                Ok(Some(p)) => p,
                Ok(None) => {
                    self.state = State::Done;
                    return None;
                }
                Err(e) => return self.stop(e),
            };
            self.state = State::After(pos);
            let key = match set.key(pos) {
                Ok(k) => k,
                Err(e) => return self.stop(e),
            };
            if set.hidden(&key) {
                continue;
            }
            return Some(match set.info(pos) {
                Ok(i) => Item::Tensor(self.ck.entry(pos, i)),
                Err(e) => Item::BadEntry {
                    reason: format!("index entry unreadable: {}", self.ck.reason(e, &key)),
                    key,
                },
            });
        }
    }
}
