//! A checkpoint's tensors as its edits ([`super::edits`]) leave them: a [`TensorSet`] over the
//! source's, in the edited key order, that costs the number of edits, not of tensors.
//!
//! The edited key space is a sorted list of disjoint *segments*, each a range of the new keys
//! that maps, by replacing the prefix `np` with `sp`, onto a range of the source's keys (the
//! identity at first: one segment of everything). A drop cuts a range out; a rename cuts one
//! out and puts it back under its new prefix; a set drops the key and adds a tensor of the
//! edits directory. What a drop cut out stays as a *dead* segment, so that a position handed
//! out before still names the key it had (a directory numbered by its first tensor keeps its
//! name while `rm -r` empties it).
//!
//! Positions are stable: a source tensor keeps its source position through renames, and a set
//! tensor gets a new one of its own ([`ADDED`] and up), never reused, so that whatever a
//! position names (its bytes, its size, a cache entry) never changes; a reader holding a
//! tensor open keeps reading the bytes it opened. Each edit makes a new [`State`] and swaps it
//! in whole: a call sees the old edits or the new, never half of one.

use crate::sync::{lock, read_lock, write_lock};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, RwLock};

use super::edits::Record;
use super::tensors::{Stored, TensorData, TensorInfo, TensorSet, POS_BITS};
use crate::error::{FsError, FsResult};
use crate::parse::dtype::DType;
use crate::source::bytes::FileMeta;

/// Positions from here on are tensors the edits added (`ADDED + n`, the `n`th set).
pub(crate) const ADDED: u64 = 1 << (POS_BITS - 1);
/// Positions from here on name directories ([`TensorSet::anchor`]): `ANCHORS + n`, the `n`th
/// prefix asked for, whose key is the prefix.
pub(crate) const ANCHORS: u64 = ADDED | (1 << (POS_BITS - 2));
/// Positions from here on are files being written ([`crate::fs::edit`]): `PENDING + handle`;
/// no tensor of the set is there.
pub(crate) const PENDING: u64 = ANCHORS | (1 << (POS_BITS - 3));

/// The least string above every string that starts with `p` (`None`: there is none).
fn succ(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(&last) = v.last() {
        if last == 0xff {
            v.pop();
        } else {
            *v.last_mut()? += 1;
            return Some(v);
        }
    }
    None
}

fn cat(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = a.to_vec();
    v.extend_from_slice(b);
    v
}

/// The range of new keys a record's key names: the tensor `key` alone, or every key under
/// `key/`.
fn range_of(key: &[u8], subtree: bool) -> (Vec<u8>, Option<Vec<u8>>) {
    if subtree {
        let p = cat(key, b"/");
        let hi = succ(&p);
        (p, hi)
    } else {
        (key.to_vec(), Some(cat(key, b"\0")))
    }
}

fn below(k: &[u8], hi: Option<&[u8]>) -> bool {
    hi.is_none_or(|h| k < h)
}

/// New keys `[nlo, nhi)` (all starting with `np`), the source's keys `sp ‖ rest` for each new
/// key `np ‖ rest`: source keys `[slo, shi)`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seg {
    nlo: Vec<u8>,
    nhi: Option<Vec<u8>>,
    np: Vec<u8>,
    sp: Vec<u8>,
    slo: Vec<u8>,
    shi: Option<Vec<u8>>,
}

impl Seg {
    fn new(nlo: Vec<u8>, nhi: Option<Vec<u8>>, np: Vec<u8>, sp: Vec<u8>) -> Seg {
        let bound = |b: &[u8]| match b.strip_prefix(np.as_slice()) {
            Some(rest) => Some(cat(&sp, rest)),
            None => succ(&sp),
        };
        let slo = if nlo.starts_with(&np) {
            cat(&sp, &nlo[np.len()..])
        } else {
            sp.clone()
        };
        let shi = nhi.as_deref().and_then(bound);
        Seg {
            nlo,
            nhi,
            np,
            sp,
            slo,
            shi,
        }
    }

    fn identity() -> Seg {
        Seg::new(Vec::new(), None, Vec::new(), Vec::new())
    }

    /// The source key of new key `k` (one of the segment's).
    fn to_src(&self, k: &[u8]) -> Vec<u8> {
        match k.strip_prefix(self.np.as_slice()) {
            Some(rest) => cat(&self.sp, rest),
            None => self.slo.clone(),
        }
    }

    /// The new key of source key `s` (one of the segment's).
    fn to_new(&self, s: &[u8]) -> Vec<u8> {
        match s.strip_prefix(self.sp.as_slice()) {
            Some(rest) => cat(&self.np, rest),
            None => s.to_vec(),
        }
    }

    fn has_src(&self, s: &[u8]) -> bool {
        s >= self.slo.as_slice() && below(s, self.shi.as_deref())
    }

    /// The part of the segment within new keys `[lo, hi)`, if any.
    fn clip(&self, lo: &[u8], hi: Option<&[u8]>) -> Option<Seg> {
        let nlo = if lo > self.nlo.as_slice() {
            lo.to_vec()
        } else {
            self.nlo.clone()
        };
        let nhi = match (self.nhi.as_deref(), hi) {
            (Some(a), Some(b)) => Some(a.min(b).to_vec()),
            (a, b) => a.or(b).map(<[u8]>::to_vec),
        };
        if !below(&nlo, nhi.as_deref()) {
            return None;
        }
        Some(Seg::new(nlo, nhi, self.np.clone(), self.sp.clone()))
    }

    /// The segment moved from under `from` to under `to` (every new key of it starts with
    /// `from`).
    fn moved(&self, from: &[u8], to: &[u8]) -> Seg {
        let (np, sp) = if self.np.len() >= from.len() {
            (cat(to, &self.np[from.len()..]), self.sp.clone())
        } else {
            (to.to_vec(), cat(&self.sp, &from[self.np.len()..]))
        };
        let map = |b: &[u8]| match b.strip_prefix(from) {
            Some(rest) => Some(cat(to, rest)),
            None => succ(to),
        };
        let nlo = map(&self.nlo).unwrap_or_else(|| to.to_vec());
        let nhi = match &self.nhi {
            Some(h) => map(h),
            None => succ(to),
        };
        Seg::new(nlo, nhi, np, sp)
    }
}

/// The array of the `.npy` file at `path` (`parse::npy::array` of its header and size): its
/// dtype, shape, and where its data lies; an error naming the file, in words.
pub(crate) fn npy_array(path: &Path) -> Result<(DType, Vec<u64>, u64, u64), String> {
    use std::io::Read;
    let bad = |e: String| format!("{}: {e}", path.display());
    let f = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    let size = f.metadata().map_err(|e| bad(e.to_string()))?.len();
    let mut head = Vec::new();
    f.take((crate::parse::npy::MAX_HEADER + 16) as u64)
        .read_to_end(&mut head)
        .map_err(|e| bad(e.to_string()))?;
    crate::parse::npy::array(&head, size).map_err(bad)
}

/// A tensor the edits set: an `.npy` file of the edits directory.
pub(crate) struct AddedTensor {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    pub(crate) path: PathBuf,
    offset: u64,
    len: u64,
    data: OnceLock<Arc<NpyData>>,
}

impl AddedTensor {
    /// The `.npy` file at `path`, checked: a complete array of a dtype a checkpoint holds.
    pub(crate) fn open(path: &Path) -> Result<AddedTensor, String> {
        let (dtype, shape, offset, len) = npy_array(path)?;
        Ok(AddedTensor {
            dtype,
            shape,
            path: path.to_path_buf(),
            offset,
            len,
            data: OnceLock::new(),
        })
    }

    /// The tensor a set record of the edits directory `dir` adds (`None` for other records).
    fn of(r: &Record, dir: &Path) -> Result<Option<Arc<AddedTensor>>, String> {
        match r {
            Record::Set { npy, .. } => Ok(Some(Arc::new(AddedTensor::open(&dir.join(npy))?))),
            _ => Ok(None),
        }
    }

    fn data(&self) -> FsResult<Arc<NpyData>> {
        if let Some(d) = self.data.get() {
            return Ok(d.clone());
        }
        let file = std::fs::File::open(&self.path)?;
        let d = Arc::new(NpyData {
            file,
            offset: self.offset,
            len: self.len,
            path: self.path.clone(),
        });
        Ok(self.data.get_or_init(|| d).clone())
    }
}

/// An added tensor's `.bin`: the data of its `.npy` file, read in place.
struct NpyData {
    file: std::fs::File,
    offset: u64,
    len: u64,
    path: PathBuf,
}

impl TensorData for NpyData {
    fn size(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, len: usize) -> FsResult<Bytes> {
        let n = (self.len.saturating_sub(offset)).min(len as u64) as usize;
        let mut buf = vec![0u8; n];
        let got = self.read_into(offset, &mut buf)?;
        buf.truncate(got);
        Ok(Bytes::from(buf))
    }

    fn read_into(&self, offset: u64, buf: &mut [u8]) -> FsResult<usize> {
        use std::os::unix::fs::FileExt;
        let n = (self.len.saturating_sub(offset)).min(buf.len() as u64) as usize;
        let mut done = 0;
        while done < n {
            let at = self.offset + offset + done as u64;
            match self.file.read_at(&mut buf[done..n], at) {
                Ok(0) => {
                    return Err(FsError::Io(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{}: cut short after it was written", self.path.display()),
                    )))
                }
                Ok(k) => done += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(n)
    }
}

/// The edits applied, as of one edit.
#[derive(Clone, Default)]
struct State {
    /// Live segments, sorted by `nlo`, disjoint.
    segs: Vec<Seg>,
    /// `segs` indices sorted by `slo`.
    by_src: Vec<usize>,
    /// What drops cut out, sorted by `slo`, disjoint (with each other and with `segs`).
    dead: Vec<Seg>,
    /// Every added tensor, by number, with its key now (or when it went).
    added: Vec<(Vec<u8>, Arc<AddedTensor>)>,
    /// The live ones by key.
    live_added: BTreeMap<Vec<u8>, usize>,
    /// Whether there is any edit (none: the source's set as it is).
    edited: bool,
}

/// Which segment of `list` (sorted by `slo` through `order`, or itself) holds source key `s`:
/// its index in `list`.
fn find_src(list: &[Seg], order: Option<&[usize]>, s: &[u8]) -> Option<usize> {
    let n = match order {
        Some(o) => o.partition_point(|&i| list[i].slo.as_slice() <= s),
        None => list.partition_point(|g| g.slo.as_slice() <= s),
    };
    let i = n.checked_sub(1)?;
    let i = match order {
        Some(o) => *o.get(i)?,
        None => i,
    };
    list.get(i)?.has_src(s).then_some(i)
}

impl State {
    fn initial() -> State {
        State {
            segs: vec![Seg::identity()],
            by_src: vec![0],
            ..State::default()
        }
    }

    /// Whether `seg` holds any source key.
    fn nonempty(src: &dyn TensorSet, seg: &Seg) -> FsResult<bool> {
        match src.seek(&seg.slo)? {
            None => Ok(false),
            Some(p) => Ok(below(&src.key(p)?, seg.shi.as_deref())),
        }
    }

    /// Removes new keys `[lo, hi)` from the live segments; returns what was cut out.
    fn cut(&mut self, src: &dyn TensorSet, lo: &[u8], hi: Option<&[u8]>) -> FsResult<Vec<Seg>> {
        let mut keep = Vec::with_capacity(self.segs.len() + 2);
        let mut out = Vec::new();
        for s in std::mem::take(&mut self.segs) {
            let overlaps = below(&s.nlo, hi) && s.nhi.as_deref().is_none_or(|h| lo < h);
            if !overlaps {
                keep.push(s);
                continue;
            }
            if let Some(l) = s.clip(&s.nlo, Some(lo)) {
                if Self::nonempty(src, &l)? {
                    keep.push(l);
                }
            }
            if let Some(m) = s.clip(lo, hi) {
                out.push(m);
            }
            if let Some(h) = hi {
                if let Some(r) = s.clip(h, s.nhi.as_deref()) {
                    if Self::nonempty(src, &r)? {
                        keep.push(r);
                    }
                }
            }
        }
        keep.sort_by(|a, b| a.nlo.cmp(&b.nlo));
        self.segs = keep;
        Ok(out)
    }

    fn reindex(&mut self) {
        let mut order: Vec<usize> = (0..self.segs.len()).collect();
        order.sort_by(|&a, &b| self.segs[a].slo.cmp(&self.segs[b].slo));
        self.by_src = order;
    }

    /// Drops new keys `[lo, hi)`: source tensors to the dead, added ones out of the live.
    fn drop_range(&mut self, src: &dyn TensorSet, lo: &[u8], hi: Option<&[u8]>) -> FsResult<()> {
        for piece in self.cut(src, lo, hi)? {
            if Self::nonempty(src, &piece)? {
                self.bury(src, piece)?;
            }
        }
        let gone: Vec<Vec<u8>> = self
            .live_added
            .range::<[u8], _>((Bound::Included(lo), Bound::Unbounded))
            .take_while(|(k, _)| below(k, hi))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.live_added.remove(&k);
        }
        Ok(())
    }

    /// Keeps a dropped piece among the dead, joined to a neighbour it continues (the same
    /// mapping, no source key between): `rm -r` in key order leaves one dead segment.
    fn bury(&mut self, src: &dyn TensorSet, piece: Seg) -> FsResult<()> {
        let at = self.dead.partition_point(|d| d.slo < piece.slo);
        let joins = |a: &Seg, b: &Seg| -> FsResult<bool> {
            if a.np != b.np || a.sp != b.sp {
                return Ok(false);
            }
            let Some(h) = a.shi.as_deref() else {
                return Ok(false);
            };
            Ok(match src.seek(h)? {
                None => true,
                Some(p) => src.key(p)? >= b.slo,
            })
        };
        let mut piece = piece;
        let mut at = at;
        if at > 0 && joins(&self.dead[at - 1], &piece)? {
            let a = self.dead.remove(at - 1);
            piece = Seg::new(a.nlo, piece.nhi, a.np, a.sp);
            at -= 1;
        }
        if at < self.dead.len() && joins(&piece, &self.dead[at])? {
            let b = self.dead.remove(at);
            piece = Seg::new(piece.nlo, b.nhi, piece.np, piece.sp);
        }
        self.dead.insert(at, piece);
        Ok(())
    }

    fn apply(
        &mut self,
        src: &dyn TensorSet,
        r: &Record,
        added: Option<Arc<AddedTensor>>,
    ) -> FsResult<()> {
        self.edited = true;
        match r {
            Record::Drop { key, subtree } => {
                let (lo, hi) = range_of(key, *subtree);
                self.drop_range(src, &lo, hi.as_deref())?;
            }
            Record::Rename { key, to, subtree } => {
                let (lo, hi) = range_of(key, *subtree);
                let (from, into) = if *subtree {
                    (cat(key, b"/"), cat(to, b"/"))
                } else {
                    (key.clone(), to.clone())
                };
                let pieces = self.cut(src, &lo, hi.as_deref())?;
                let moving: Vec<(Vec<u8>, usize)> = self
                    .live_added
                    .range::<[u8], _>((Bound::Included(lo.as_slice()), Bound::Unbounded))
                    .take_while(|(k, _)| below(k, hi.as_deref()))
                    .map(|(k, &i)| (k.clone(), i))
                    .collect();
                for (k, _) in &moving {
                    self.live_added.remove(k);
                }
                let (lo2, hi2) = range_of(to, *subtree);
                self.drop_range(src, &lo2, hi2.as_deref())?;
                for p in pieces {
                    let m = p.moved(&from, &into);
                    let at = self.segs.partition_point(|s| s.nlo < m.nlo);
                    self.segs.insert(at, m);
                }
                for (k, i) in moving {
                    let nk = cat(&into, &k[from.len()..]);
                    if let Some(a) = self.added.get_mut(i) {
                        a.0 = nk.clone();
                    }
                    self.live_added.insert(nk, i);
                }
            }
            Record::Set { key, .. } => {
                let (lo, hi) = range_of(key, false);
                self.drop_range(src, &lo, hi.as_deref())?;
                if let Some(a) = added {
                    self.added.push((key.clone(), a));
                    self.live_added.insert(key.clone(), self.added.len() - 1);
                }
            }
        }
        self.reindex();
        Ok(())
    }
}

/// Directory prefixes numbered so far: by prefix, and by number.
type Anchors = (std::collections::HashMap<Vec<u8>, u64>, Vec<Arc<[u8]>>);

/// A checkpoint's tensors with edits applied (see the module's doc).
pub(crate) struct Edited {
    source: Arc<dyn TensorSet>,
    state: RwLock<Arc<State>>,
    /// Edits applied so far (what a view rendered from the set compares to know it is old).
    version: std::sync::atomic::AtomicU64,
    /// Directory prefixes numbered so far ([`TensorSet::anchor`]), and by number.
    anchors: std::sync::Mutex<Anchors>,
}

impl Edited {
    /// The source's tensors with `records` (of the edits directory `dir`) applied in order.
    pub(crate) fn new(
        source: Arc<dyn TensorSet>,
        records: &[Record],
        dir: &Path,
    ) -> Result<Edited, String> {
        let e = Edited {
            source,
            state: RwLock::new(Arc::new(State::initial())),
            version: Default::default(),
            anchors: Default::default(),
        };
        for r in records {
            e.apply(r, dir)?;
        }
        Ok(e)
    }

    fn st(&self) -> Arc<State> {
        read_lock(&self.state).clone()
    }

    /// Applies one more record (its values file, for a set, in `dir`), in one step.
    pub(crate) fn apply(&self, r: &Record, dir: &Path) -> Result<(), String> {
        let added = AddedTensor::of(r, dir)?;
        let mut w = write_lock(&self.state);
        let mut next = State::clone(&w);
        next.apply(self.source.as_ref(), r, added)
            .map_err(|e| format!("{}: {e}", self.source.path().display()))?;
        *w = Arc::new(next);
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// The set as it would be with `r` applied too (this one unchanged): to judge an edit
    /// before making it.
    pub(crate) fn with_applied(&self, r: &Record, dir: &Path) -> Result<Edited, String> {
        let e = Edited {
            source: self.source.clone(),
            state: RwLock::new(self.st()),
            version: Default::default(),
            anchors: Default::default(),
        };
        e.apply(r, dir)?;
        Ok(e)
    }

    /// What the edits did to the source's tensor `key`: `None` nothing, `Some(None)` dropped,
    /// `Some(Some(new))` renamed (export's key fate).
    pub(crate) fn fate(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        let pos = self.source.seek(key).ok()??;
        if self.source.key(pos).ok()? != key {
            return None;
        }
        let now = self.key(pos).ok()?;
        if !self.live(pos).ok()? {
            // Given new values (a set under the key it had then): still that tensor, by name.
            let there = self
                .seek(&now)
                .ok()
                .flatten()
                .and_then(|p| self.key(p).ok())
                .is_some_and(|k| k == now);
            return if there { Some(Some(now)) } else { Some(None) };
        }
        (now != key).then_some(Some(now))
    }

    /// Starts again from the source with `records` (what was left after a discard).
    pub(crate) fn reset(&self, records: &[Record], dir: &Path) -> Result<(), String> {
        let mut st = State::initial();
        for r in records {
            let added = AddedTensor::of(r, dir)?;
            st.apply(self.source.as_ref(), r, added)
                .map_err(|e| format!("{}: {e}", self.source.path().display()))?;
        }
        // Positions of sets are never reused: the ones discarded stay, dead.
        let old = self.st();
        let mut added = old.added.clone();
        let base = added.len();
        let mut live = BTreeMap::new();
        for (k, i) in st.live_added {
            live.insert(k, i + base);
        }
        added.extend(st.added);
        st.added = added;
        st.live_added = live;
        *write_lock(&self.state) = Arc::new(st);
        self.version
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// How many edits were applied (changes with every one).
    pub(crate) fn version(&self) -> u64 {
        self.version.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The prefix anchor position `pos` names.
    fn anchor_key(&self, pos: u64) -> Option<Arc<[u8]>> {
        let i = usize::try_from(pos.checked_sub(ANCHORS)?).ok()?;
        let a = lock(&self.anchors);
        a.1.get(i).cloned()
    }

    /// The tensor a set made at `pos`, if `pos` is one.
    pub(crate) fn added(&self, pos: u64) -> Option<Arc<AddedTensor>> {
        if pos >= ANCHORS {
            return None;
        }
        let i = usize::try_from(pos.checked_sub(ADDED)?).ok()?;
        self.st().added.get(i).map(|(_, a)| a.clone())
    }

    /// Whether the tensor at `pos` is one of the edited set's (not dropped).
    pub(crate) fn live(&self, pos: u64) -> FsResult<bool> {
        if pos >= ANCHORS {
            return Ok(false);
        }
        let st = self.st();
        if let Some(i) = pos.checked_sub(ADDED) {
            let Some((k, _)) = st.added.get(i as usize) else {
                return Ok(false);
            };
            return Ok(st.live_added.get(k) == Some(&(i as usize)));
        }
        if !st.edited {
            return Ok(true);
        }
        let s = self.source.key(pos)?;
        Ok(find_src(&st.segs, Some(&st.by_src), &s).is_some())
    }

    fn key_in(&self, st: &State, pos: u64) -> FsResult<Vec<u8>> {
        if pos >= PENDING {
            return Err(FsError::NotFound);
        }
        if pos >= ANCHORS {
            return self
                .anchor_key(pos)
                .map(|k| k.to_vec())
                .ok_or(FsError::NotFound);
        }
        if let Some(i) = pos.checked_sub(ADDED) {
            return st
                .added
                .get(usize::try_from(i).map_err(|_| FsError::NotFound)?)
                .map(|(k, _)| k.clone())
                .ok_or(FsError::NotFound);
        }
        let s = self.source.key(pos)?;
        if !st.edited {
            return Ok(s);
        }
        if let Some(i) = find_src(&st.segs, Some(&st.by_src), &s) {
            return Ok(st.segs[i].to_new(&s));
        }
        if let Some(i) = find_src(&st.dead, None, &s) {
            return Ok(st.dead[i].to_new(&s));
        }
        Ok(s)
    }

    /// The first live source tensor at or after new key `key`, from segment `from` on.
    fn seek_segs(&self, st: &State, key: &[u8], from: usize) -> FsResult<Option<(Vec<u8>, u64)>> {
        let start = st
            .segs
            .partition_point(|s| !below(key, s.nhi.as_deref()))
            .max(from);
        for s in st.segs.iter().skip(start) {
            let k = if key > s.nlo.as_slice() { key } else { &s.nlo };
            let src = s.to_src(k);
            if let Some(p) = self.source.seek(&src)? {
                let sk = self.source.key(p)?;
                if below(&sk, s.shi.as_deref()) {
                    return Ok(Some((s.to_new(&sk), p)));
                }
            }
        }
        Ok(None)
    }

    fn first_added(st: &State, from: Bound<&[u8]>) -> Option<(Vec<u8>, u64)> {
        st.live_added
            .range::<[u8], _>((from, Bound::Unbounded))
            .next()
            .map(|(k, &i)| (k.clone(), ADDED + i as u64))
    }

    fn least(a: Option<(Vec<u8>, u64)>, b: Option<(Vec<u8>, u64)>) -> Option<u64> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if a.0 <= b.0 { a.1 } else { b.1 }),
            (a, b) => a.or(b).map(|x| x.1),
        }
    }
}

impl TensorSet for Edited {
    fn path(&self) -> &Path {
        self.source.path()
    }
    fn meta(&self) -> FileMeta {
        self.source.meta()
    }
    fn source_bytes(&self) -> u64 {
        self.source.source_bytes()
    }

    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
        let st = self.st();
        if !st.edited {
            return self.source.seek(key);
        }
        let a = self.seek_segs(&st, key, 0)?;
        let b = Self::first_added(&st, Bound::Included(key));
        Ok(Self::least(a, b))
    }

    fn next(&self, pos: u64) -> FsResult<Option<u64>> {
        let st = self.st();
        if !st.edited {
            return self.source.next(pos);
        }
        let key = self.key_in(&st, pos)?;
        let b = Self::first_added(&st, Bound::Excluded(key.as_slice()));
        if pos < ADDED {
            let s = self.source.key(pos)?;
            if let Some(i) = find_src(&st.segs, Some(&st.by_src), &s) {
                let g = &st.segs[i];
                let a = match self.source.next(pos)? {
                    Some(p2) => {
                        let s2 = self.source.key(p2)?;
                        if g.has_src(&s2) {
                            Some((g.to_new(&s2), p2))
                        } else {
                            self.seek_segs(&st, &g.nlo, i + 1)?
                        }
                    }
                    None => self.seek_segs(&st, &g.nlo, i + 1)?,
                };
                return Ok(Self::least(a, b));
            }
        }
        let a = self.seek_segs(&st, &cat(&key, b"\0"), 0)?;
        Ok(Self::least(a, b))
    }

    fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
        self.key_in(&self.st(), pos)
    }

    fn hidden(&self, key: &[u8]) -> bool {
        self.source.hidden(key)
    }

    fn version(&self) -> Option<u64> {
        Some(Edited::version(self))
    }

    fn renamed(&self, key: &[u8]) -> Option<Option<Vec<u8>>> {
        self.fate(key)
    }

    fn anchor(&self, prefix: &[u8]) -> Option<u64> {
        let mut a = lock(&self.anchors);
        if let Some(&p) = a.0.get(prefix) {
            return Some(p);
        }
        let pos = ANCHORS.checked_add(a.1.len() as u64)?;
        if pos >= PENDING {
            return None;
        }
        a.1.push(Arc::from(prefix));
        a.0.insert(prefix.to_vec(), pos);
        Some(pos)
    }

    fn info(&self, pos: u64) -> FsResult<TensorInfo> {
        if pos >= ANCHORS {
            return Err(FsError::NotFound);
        }
        let st = self.st();
        if let Some(i) = pos.checked_sub(ADDED) {
            let (k, a) = st.added.get(i as usize).ok_or(FsError::NotFound)?;
            return Ok(TensorInfo {
                key: k.clone(),
                dtype: a.dtype,
                shape: a.shape.clone(),
                stored: None,
                slices: Vec::new(),
            });
        }
        let mut info = self.source.info(pos)?;
        if st.edited {
            info.key = self.key_in(&st, pos)?;
        }
        Ok(info)
    }

    fn open(&self, pos: u64) -> FsResult<Arc<dyn TensorData>> {
        if pos >= ADDED {
            let a = self.added(pos).ok_or(FsError::NotFound)?;
            return Ok(a.data()?);
        }
        self.source.open(pos)
    }

    fn slice_locations(&self, pos: u64) -> FsResult<Vec<Stored>> {
        if pos >= ADDED {
            return Ok(Vec::new());
        }
        self.source.slice_locations(pos)
    }

    fn complete(&self) -> bool {
        self.source.complete()
    }
    fn part_files(&self) -> Vec<PathBuf> {
        self.source.part_files()
    }
    fn attr_names(&self) -> &'static [&'static str] {
        self.source.attr_names()
    }
    fn attrs(&self, pos: u64) -> FsResult<Vec<Option<String>>> {
        if pos >= ADDED {
            return Ok(Vec::new());
        }
        self.source.attrs(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::tensors::{next_position, seek_sorted};
    use crate::testkit::rng::Rng;

    /// Sorted keys, positions `0..n`.
    struct Keys(Vec<Vec<u8>>);

    impl TensorSet for Keys {
        fn path(&self) -> &Path {
            Path::new("keys")
        }
        fn meta(&self) -> FileMeta {
            FileMeta {
                mtime: std::time::UNIX_EPOCH,
                uid: 0,
                gid: 0,
                mode: 0o444,
            }
        }
        fn source_bytes(&self) -> u64 {
            0
        }
        fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
            Ok(seek_sorted(&self.0, key, |k| k))
        }
        fn next(&self, pos: u64) -> FsResult<Option<u64>> {
            Ok(next_position(pos, self.0.len()))
        }
        fn key(&self, pos: u64) -> FsResult<Vec<u8>> {
            self.0.get(pos as usize).cloned().ok_or(FsError::NotFound)
        }
        fn hidden(&self, _key: &[u8]) -> bool {
            false
        }
        fn info(&self, _pos: u64) -> FsResult<TensorInfo> {
            Err(FsError::NotFound)
        }
        fn open(&self, _pos: u64) -> FsResult<Arc<dyn TensorData>> {
            Err(FsError::NotFound)
        }
        fn slice_locations(&self, _pos: u64) -> FsResult<Vec<Stored>> {
            Ok(Vec::new())
        }
    }

    fn random_key(r: &mut Rng) -> Vec<u8> {
        let parts = 1 + r.index(3);
        let comps: [&[u8]; 5] = [b"a", b"b", b"ab", b"c", b"\xff"];
        let mut k = Vec::new();
        for i in 0..parts {
            if i > 0 {
                k.push(b'/');
            }
            k.extend_from_slice(comps[r.index(comps.len())]);
        }
        k
    }

    /// What the edits mean, done the plain way on a map of every key: where each tensor came
    /// from (a source position, or the `n`th set).
    fn model_apply(m: &mut BTreeMap<Vec<u8>, u64>, r: &Record, added: u64) {
        let under = |k: &[u8], key: &[u8], subtree: bool| {
            if subtree {
                k.starts_with(&cat(key, b"/"))
            } else {
                k == key
            }
        };
        match r {
            Record::Drop { key, subtree } => m.retain(|k, _| !under(k, key, *subtree)),
            Record::Rename { key, to, subtree } => {
                let moving: Vec<(Vec<u8>, u64)> = m
                    .iter()
                    .filter(|(k, _)| under(k, key, *subtree))
                    .map(|(k, v)| (k.clone(), *v))
                    .collect();
                for (k, _) in &moving {
                    m.remove(k);
                }
                m.retain(|k, _| !under(k, to, *subtree));
                for (k, v) in moving {
                    m.insert(cat(to, &k[key.len()..]), v);
                }
            }
            Record::Set { key, .. } => {
                m.insert(key.clone(), ADDED + added);
            }
        }
    }

    fn listing(e: &Edited) -> Vec<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        let mut p = e.seek(b"").unwrap();
        while let Some(q) = p {
            out.push((e.key(q).unwrap(), q));
            p = e.next(q).unwrap();
            assert!(out.len() < 10_000, "a listing that does not end");
        }
        out
    }

    /// Random drops, renames (of tensors and of subtrees) and sets, checked after each against
    /// the same edits done on a map of every key: the listing, seeks, every position's key.
    #[test]
    fn edits_list_as_the_same_edits_done_key_by_key() {
        let d = tempfile::tempdir().unwrap();
        let npy = d.path().join("tensors/0.npy");
        std::fs::create_dir_all(npy.parent().unwrap()).unwrap();
        let mut bytes = crate::parse::npy::header("<f4", &[1]).unwrap();
        bytes.extend_from_slice(&1f32.to_le_bytes());
        std::fs::write(&npy, &bytes).unwrap();
        for seed in 1..200u64 {
            let mut r = Rng::new(seed);
            let mut keys: Vec<Vec<u8>> = (0..r.index(30)).map(|_| random_key(&mut r)).collect();
            keys.sort();
            keys.dedup();
            let src: Arc<dyn TensorSet> = Arc::new(Keys(keys.clone()));
            let e = Edited::new(src, &[], d.path()).unwrap();
            let mut model: BTreeMap<Vec<u8>, u64> = keys
                .iter()
                .enumerate()
                .map(|(i, k)| (k.clone(), i as u64))
                .collect();
            let mut added = 0;
            let mut done = Vec::new();
            for _ in 0..r.index(12) {
                let key = random_key(&mut r);
                let rec = match r.index(5) {
                    0 => Record::Drop {
                        key,
                        subtree: false,
                    },
                    1 => Record::Drop { key, subtree: true },
                    2 => Record::Rename {
                        key,
                        to: random_key(&mut r),
                        subtree: false,
                    },
                    3 => {
                        let to = random_key(&mut r);
                        // Unix refuses a directory moved into itself; so do the callers.
                        if to.starts_with(&cat(&key, b"/")) || to == key {
                            continue;
                        }
                        Record::Rename {
                            key,
                            to,
                            subtree: true,
                        }
                    }
                    _ => Record::Set {
                        key,
                        npy: "tensors/0.npy".into(),
                    },
                };
                e.apply(&rec, d.path()).unwrap();
                model_apply(&mut model, &rec, added);
                if matches!(rec, Record::Set { .. }) {
                    added += 1;
                }
                done.push(rec.line());
                let want: Vec<(Vec<u8>, u64)> =
                    model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                assert_eq!(listing(&e), want, "seed {seed} after {done:?}");
                for _ in 0..5 {
                    let k = random_key(&mut r);
                    let want = model.range(k.clone()..).next().map(|(_, v)| *v);
                    assert_eq!(
                        e.seek(&k).unwrap(),
                        want,
                        "seek {k:?}, seed {seed}, {done:?}"
                    );
                }
                for (k, v) in &model {
                    assert_eq!(&e.key(*v).unwrap(), k, "seed {seed}");
                    assert!(e.live(*v).unwrap());
                }
            }
        }
    }

    /// `rm -r` drops a directory's tensors one by one, in key order: one dead segment, and the
    /// live ones do not grow (what each later edit costs stays the same).
    #[test]
    fn tensors_dropped_in_key_order_leave_one_dead_segment() {
        let keys: Vec<Vec<u8>> = (0..500)
            .map(|i| format!("opt/{i:04}").into_bytes())
            .chain([b"model/w".to_vec(), b"step".to_vec()])
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        let src: Arc<dyn TensorSet> = Arc::new(Keys(sorted));
        let d = tempfile::tempdir().unwrap();
        let e = Edited::new(src, &[], d.path()).unwrap();
        for i in 0..500 {
            e.apply(
                &Record::Drop {
                    key: format!("opt/{i:04}").into_bytes(),
                    subtree: false,
                },
                d.path(),
            )
            .unwrap();
        }
        let st = e.st();
        assert_eq!(st.dead.len(), 1, "{:?}", st.dead);
        assert!(st.segs.len() <= 2, "{:?}", st.segs);
        assert_eq!(
            listing(&e).into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
            [b"model/w".to_vec(), b"step".to_vec()]
        );
    }

    #[test]
    fn a_dropped_tensor_keeps_the_key_it_had_and_its_bytes() {
        let src: Arc<dyn TensorSet> = Arc::new(Keys(vec![b"m/a".to_vec(), b"m/b".to_vec()]));
        let d = tempfile::tempdir().unwrap();
        let e = Edited::new(
            src,
            &[
                Record::Rename {
                    key: b"m".to_vec(),
                    to: b"n".to_vec(),
                    subtree: true,
                },
                Record::Drop {
                    key: b"n/a".to_vec(),
                    subtree: false,
                },
            ],
            d.path(),
        )
        .unwrap();
        assert_eq!(e.key(0).unwrap(), b"n/a");
        assert!(!e.live(0).unwrap());
        assert_eq!(listing(&e), [(b"n/b".to_vec(), 1)]);
    }
}
