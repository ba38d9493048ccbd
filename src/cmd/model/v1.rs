//! The V1 side of [`super::Ckpt`]: a V1 checkpoint read through the core's [`TensorSet`]
//! ([`V1Set`]) and nothing else of it. V1 keeps no per-tensor CRC: the core checks the CRC-32C of
//! every table block a read comes from, so a tensor is verified by reading all of its bytes, and
//! two tensors are compared by their bytes. A tensor is one piece, its served bytes (a
//! partitioned tensor assembled by the core).
//!
//! A sharded V1 checkpoint lists in each shard only the tensors that shard holds: a missing shard
//! is reported as such ([`Item::MissingShard`]), first in a walk.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::{bare, At, Handle as AnyHandle, Item, Piece, TensorInfo};
use crate::error::FsError;
use crate::source::bytes::Store;
use crate::source::tensors::{self, TensorData, TensorSet};
use crate::source::v1::V1Set;

/// Bytes read at a time when a tensor is read whole.
const READ: usize = 256 << 10;
/// Shard counts above this are not believed from a file name (TensorFlow writes `%05d`).
const MAX_SHARDS: u32 = 100_000;

/// An opened V1 checkpoint.
pub(super) struct V1Ckpt {
    set: Box<dyn TensorSet>,
    /// Shards the file names say the checkpoint has that are not among its files:
    /// `(number, count, path)`.
    missing: Vec<(u32, u32, PathBuf)>,
}

/// A tensor of a [`V1Ckpt`]: its position, and its bytes once opened (shared by the tensor's
/// [`TensorInfo`] and its piece).
#[derive(Clone)]
pub(super) struct Handle {
    pos: u64,
    key: Vec<u8>,
    data: Arc<OnceLock<Result<Arc<dyn TensorData>, String>>>,
    /// The outcome of the tensor's first read, which locates it (see [`V1Ckpt::located`]).
    located: Arc<OnceLock<Result<(), String>>>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("pos", &self.pos)
            .field("key", &String::from_utf8_lossy(&self.key))
            .finish_non_exhaustive()
    }
}

impl V1Ckpt {
    /// The V1 checkpoint `path` names (a file, a shard, a `?????` pattern), made of `files`.
    pub(super) fn open(
        store: &dyn Store,
        path: &Path,
        files: &[PathBuf],
    ) -> Result<V1Ckpt, String> {
        let set = V1Set::open(store, path, files).map_err(|e| e.to_string())?;
        Ok(V1Ckpt {
            set: Box::new(set),
            missing: missing_shards(files),
        })
    }

    fn path(&self) -> &Path {
        self.set.path()
    }

    /// A core error as a reason: the checkpoint's path, then what failed.
    fn reason(&self, e: FsError, key: &[u8]) -> String {
        let path = self.path().display().to_string();
        let b = bare(e, self.path(), key);
        if b.starts_with(&path) {
            b
        } else {
            format!("{path}: {b}")
        }
    }

    pub(super) fn walk(&self) -> V1Walk<'_> {
        V1Walk {
            ck: self,
            missing: 0,
            state: State::Start,
        }
    }

    /// The tensor's bytes, opened once.
    pub(super) fn data(&self, h: &Handle) -> Result<Arc<dyn TensorData>, String> {
        h.data
            .get_or_init(|| self.set.open(h.pos).map_err(|e| self.reason(e, &h.key)))
            .clone()
    }

    /// The tensor's bytes, located: its first read (of one byte) finds its entries and verifies
    /// their blocks' CRCs, done once, by one thread; threads reading other parts of the tensor
    /// at the same time wait for it rather than do it again. This also checks an empty tensor's
    /// entries (as TensorFlow's reader reads them), though it serves no bytes.
    fn located(&self, h: &Handle) -> Result<Arc<dyn TensorData>, String> {
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

    /// The one piece of a tensor: all of its served bytes. An empty tensor is located here: no
    /// read of its bytes will do it.
    pub(super) fn piece(&self, h: &Handle) -> Result<Piece, String> {
        let data = self.data(h)?;
        if data.size() == 0 {
            self.located(h)?;
        }
        Ok(Piece {
            extent: Vec::new(),
            nbytes: data.size(),
            crc: None,
            file: self.path().to_path_buf(),
            checked_by_core: false,
            at: At::V1(h.clone()),
        })
    }

    /// Served bytes `[offset, offset + len)` of a tensor (fewer at its end), checked by the core.
    pub(super) fn read(&self, h: &Handle, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        self.located(h)?
            .read(offset, len)
            .map_err(|e| self.reason(e, &h.key))
    }

    /// Reads a tensor whole (which checks it); returns its size.
    pub(super) fn read_all(&self, h: &Handle) -> Result<u64, String> {
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
}

/// What the index says of a V1 tensor. There is no stored CRC; `nbytes` is the served size of
/// a whole fixed-width tensor (0 for strings and partitioned tensors: not known before reading).
fn tensor_info(pos: u64, i: tensors::TensorInfo) -> TensorInfo {
    let partitioned = !i.slices.is_empty();
    let nbytes = match (partitioned, i.dtype.elem_size()) {
        (false, Some(s)) => i.num_elements().saturating_mul(s as u64),
        _ => 0,
    };
    TensorInfo {
        dtype: i.dtype.display_name(),
        shape: i.shape,
        partitioned,
        nbytes,
        crc: None,
        handle: AnyHandle::V1(Handle {
            pos,
            key: i.key.clone(),
            data: Arc::new(OnceLock::new()),
            located: Arc::new(OnceLock::new()),
        }),
        key: i.key,
    }
}

enum State {
    Start,
    After(u64),
    Done,
}

/// Iterator of a V1 checkpoint's walk: its missing shards, then its tensors in key order.
pub(super) struct V1Walk<'a> {
    ck: &'a V1Ckpt,
    missing: usize,
    state: State,
}

impl V1Walk<'_> {
    /// The walk cannot go on: one item saying why, then the end.
    fn stop(&mut self, e: FsError) -> Option<Item> {
        self.state = State::Done;
        Some(Item::BadEntry {
            key: b"[tensor list]".to_vec(),
            reason: format!("{}: {e}", self.ck.path().display()),
        })
    }
}

impl Iterator for V1Walk<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if let Some((shard, shards, file)) = self.ck.missing.get(self.missing) {
            self.missing += 1;
            return Some(Item::MissingShard {
                shard: *shard,
                shards: *shards,
                file: file.clone(),
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
                Ok(i) => Item::Tensor(tensor_info(pos, i)),
                Err(e) => Item::BadEntry {
                    reason: format!("meta entry unreadable: {}", self.ck.reason(e, &key)),
                    key,
                },
            });
        }
    }
}

/// `STEM-NNNNN-of-MMMMM` (at least 5 digits each, as TensorFlow writes them): `(STEM, N, M
/// as written)`.
fn shard_parts(name: &[u8]) -> Option<(&[u8], u32, &[u8])> {
    let digits = |s: &[u8]| s.len() >= 5 && s.iter().all(u8::is_ascii_digit);
    let cut = name.windows(4).rposition(|w| w == b"-of-")?;
    let (left, count) = (&name[..cut], &name[cut + 4..]);
    let dash = left.iter().rposition(|&b| b == b'-')?;
    let (stem, id) = (&left[..dash], &left[dash + 1..]);
    if !digits(id) || !digits(count) {
        return None;
    }
    let id = std::str::from_utf8(id).ok()?.parse().ok()?;
    Some((stem, id, count))
}

/// The shards of a sharded V1 checkpoint that its file names say exist and are not among
/// `files`: `(number, count, path)`. Nothing for a single file.
fn missing_shards(files: &[PathBuf]) -> Vec<(u32, u32, PathBuf)> {
    let name = |p: &PathBuf| p.file_name().map(|n| n.as_bytes().to_vec());
    let Some((dir, first)) = files
        .first()
        .and_then(|p| Some((p.parent().unwrap_or(Path::new("")), name(p)?)))
    else {
        return Vec::new();
    };
    let Some((stem, _, count)) = shard_parts(&first) else {
        return Vec::new();
    };
    let Some(n) = std::str::from_utf8(count)
        .ok()
        .and_then(|c| c.parse::<u32>().ok())
        .filter(|&n| n <= MAX_SHARDS)
    else {
        return Vec::new();
    };
    let present: HashSet<u32> = files
        .iter()
        .filter_map(name)
        .filter_map(|f| {
            shard_parts(&f)
                .filter(|(s, _, c)| *s == stem && *c == count)
                .map(|(_, i, _)| i)
        })
        .collect();
    let (stem, count) = (
        String::from_utf8_lossy(stem),
        String::from_utf8_lossy(count),
    );
    (0..n)
        .filter(|i| !present.contains(i))
        .map(|i| (i, n, dir.join(format!("{stem}-{i:05}-of-{count}"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_shards_from_names() {
        let f = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        assert!(missing_shards(&f(&["d/model.ckpt"])).is_empty());
        assert!(missing_shards(&f(&["d/m-00000-of-00002", "d/m-00001-of-00002"])).is_empty());
        assert_eq!(
            missing_shards(&f(&["d/m-1-00000-of-00003", "d/m-1-00002-of-00003"])),
            vec![(1, 3, PathBuf::from("d/m-1-00001-of-00003"))]
        );
        assert_eq!(
            missing_shards(&f(&["m-00001-of-00002"])),
            vec![(0, 2, PathBuf::from("m-00000-of-00002"))]
        );
        // A count no writer would use is not believed.
        assert!(missing_shards(&f(&["m-00000-of-9999999999"])).is_empty());
    }
}
