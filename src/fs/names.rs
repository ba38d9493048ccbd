//! `names/`: symlinks from the names users know (a TF2 checkpoint's object paths and variable
//! names, a Keras file's layer names) to the tensor files in `variables/`. One subtree instance
//! per checkpoint, built the first time it is looked up in or listed, never at mount: the pairs
//! come from [`LazyNames`] (for a TF2 checkpoint, a decode of its object graph, which grows with
//! the number of variables), and every pair is one leaf whatever the number of names.
//!
//! A name `a/b/c` is directory `a/b/` and the leaf `c`, shown as `c.bin`, `c.shape`, `c.dtype`
//! (and `c.npy` where numpy holds the dtype), each a symlink to the same file of the tensor under
//! `variables/`. Components are escaped as `variables/` escapes keys. A directory's entries are
//! sorted by name, so lookups are binary searches and listings resume from a cookie.

use crate::sync::lock;
use bytes::Bytes;
use std::sync::{Arc, OnceLock};

use crate::error::{FsError, FsResult};
use crate::formats::names::{FxMap, LazyNames};
use crate::formats::tensors::{walk, TensorSet};
use crate::fs::subtree::{slice_of, Entry, NodeAttr, Size, Subtree};
use crate::fs::{tensor_files, Kind};
use crate::namespace::ino::{cookie, names as layout, Ino};
use crate::namespace::{self, FileKind};
use crate::parse::dtype::DType;
use crate::parse::FormatError;
use crate::source::bytes::FileMeta;

/// `names/` of one checkpoint.
pub(crate) struct NamesTree {
    id: u16,
    /// The directory `names/` is in.
    parent: Ino,
    set: Arc<dyn TensorSet>,
    names: Arc<LazyNames>,
    built: OnceLock<Result<Built, String>>,
    /// Of a set whose keys change while mounted (an editable mount's): what was built, for
    /// which [`TensorSet::version`]; made anew when it changed.
    rebuilt: std::sync::Mutex<Option<(u64, Build)>>,
}

/// One build of `names/`, shared with the requests using it.
type Build = Arc<Result<Built, String>>;

/// What [`NamesTree::built`] hands out: the one built, or one of an edited set's builds.
enum BuiltRef<'a> {
    Once(&'a Built),
    Again(Build),
}

impl std::ops::Deref for BuiltRef<'_> {
    type Target = Built;
    fn deref(&self) -> &Built {
        match self {
            BuiltRef::Once(b) => b,
            // Only an `Ok` build is handed out as `Again`.
            BuiltRef::Again(a) => match &**a {
                Ok(b) => b,
                Err(_) => unreachable_built(),
            },
        }
    }
}

/// An empty build (never reached: an error is returned instead of `Again`).
fn unreachable_built() -> &'static Built {
    static EMPTY: OnceLock<Built> = OnceLock::new();
    EMPTY.get_or_init(|| Built {
        arena: Vec::new(),
        dirs: vec![Dir {
            parent: None,
            items: Vec::new(),
        }],
        leaves: Vec::new(),
    })
}

/// Where a name's text is in [`Built::arena`].
#[derive(Clone, Copy)]
struct Span {
    at: usize,
    len: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Child {
    Dir(u32),
    Leaf(u32),
}

struct Item {
    name: Span,
    child: Child,
}

struct Dir {
    /// The directory above (`None`: `names/` itself).
    parent: Option<u32>,
    /// Sorted by name, a directory before a leaf of the same name.
    items: Vec<Item>,
}

struct Leaf {
    dir: u32,
    /// Components of its name (the `../` its links climb).
    depth: u32,
    /// Its tensor's position in the set.
    pos: u64,
    dtype: DType,
    /// The length of its links' target without the file's suffix (`../` per component, then
    /// the tensor's path in `variables/`): a link's size without a lookup of its key, so a
    /// listing (READDIRPLUS: every entry's attributes) reads no index.
    target_len: u32,
}

struct Built {
    arena: Vec<u8>,
    dirs: Vec<Dir>,
    leaves: Vec<Leaf>,
}

/// A node of the subtree, decoded from its local number.
#[derive(Clone, Copy)]
enum Node {
    Dir(u32),
    Link(u32, FileKind),
}

fn dir_local(d: u32) -> u64 {
    // Directory `d` is local `d + 1`: local 0 is no node. Fits: `d` is a u32.
    layout::INDEX.put(u64::from(d) + 1).unwrap_or(0)
}

fn leaf_local(l: u32, kind: FileKind) -> Option<u64> {
    Some(layout::LEAF.put(1)? | layout::FILE.put(kind as u64)? | layout::INDEX.put(u64::from(l))?)
}

impl NamesTree {
    /// The subtree instance `id`, linked into directory `parent`; nothing is read until used.
    pub(crate) fn new(
        id: u16,
        parent: Ino,
        set: Arc<dyn TensorSet>,
        names: Arc<LazyNames>,
    ) -> Self {
        NamesTree {
            id,
            parent,
            set,
            names,
            built: OnceLock::new(),
            rebuilt: std::sync::Mutex::new(None),
        }
    }

    /// The inode of `names/` itself in subtree `id`.
    pub(crate) fn root(id: u16) -> Option<Ino> {
        Ino::new(id, dir_local(0))
    }

    fn built(&self) -> FsResult<BuiltRef<'_>> {
        let failed = |e: &String| {
            FsError::corrupt(
                "names/",
                self.set.path().display(),
                FormatError::Text(e.clone()),
            )
        };
        if let Some(v) = self.set.version() {
            let mut r = lock(&self.rebuilt);
            let stale = r.as_ref().is_none_or(|(at, _)| *at != v);
            if stale {
                *r = Some((v, Arc::new(build(&*self.set, self.names.get()))));
            }
            let b = r
                .as_ref()
                .map(|(_, b)| b.clone())
                .ok_or(FsError::NotFound)?;
            return match &*b {
                Ok(_) => Ok(BuiltRef::Again(b.clone())),
                Err(e) => Err(failed(e)),
            };
        }
        self.built
            .get_or_init(|| build(&*self.set, self.names.get()))
            .as_ref()
            .map(BuiltRef::Once)
            .map_err(failed)
    }

    fn ino(&self, local: u64) -> Ino {
        Ino::new(self.id, local).unwrap_or(Ino(0))
    }

    fn node(&self, b: &Built, local: u64) -> FsResult<Node> {
        let index = layout::INDEX.get(local);
        if layout::LEAF.get(local) == 0 {
            let d = index.checked_sub(1).ok_or(FsError::NotFound)?;
            let d = u32::try_from(d).map_err(|_| FsError::NotFound)?;
            if (d as usize) < b.dirs.len() {
                return Ok(Node::Dir(d));
            }
            return Err(FsError::NotFound);
        }
        let l = u32::try_from(index).map_err(|_| FsError::NotFound)?;
        let kind = FileKind::from_code(layout::FILE.get(local)).ok_or(FsError::NotFound)?;
        let leaf = b.leaves.get(l as usize).ok_or(FsError::NotFound)?;
        if !tensor_files::files(Some(leaf.dtype)).contains(&kind) {
            return Err(FsError::NotFound);
        }
        Ok(Node::Link(l, kind))
    }

    fn dir_ino(&self, d: Option<u32>) -> Ino {
        match d {
            None => self.parent,
            Some(d) => self.ino(dir_local(d)),
        }
    }

    /// A link's target: up to the checkpoint's root, then the tensor's file in `variables/`.
    fn target(&self, b: &Built, l: u32, kind: FileKind) -> FsResult<Vec<u8>> {
        let leaf = b.leaves.get(l as usize).ok_or(FsError::NotFound)?;
        let key = self.set.key(leaf.pos)?;
        let mut t = b"../".repeat(leaf.depth as usize);
        t.extend_from_slice(&crate::fs::views::file_path(&key, kind));
        Ok(t)
    }

    fn meta(&self) -> FileMeta {
        self.set.meta()
    }
}

/// The components of a `/`-separated name, escaped as `variables/` escapes keys (all but the
/// last as directories).
fn escaped_path(s: &[u8]) -> Vec<Vec<u8>> {
    let comps: Vec<&[u8]> = s.split(|&b| b == b'/').collect();
    let last = comps.len() - 1;
    comps
        .iter()
        .enumerate()
        .map(|(i, c)| namespace::escape(c, i < last))
        .collect()
}

/// The tree of `pairs` over `set`: one pass over the set for the dtypes of the keys named, then
/// one leaf per pair whose key the set holds. A directory is found by its escaped path (no copy
/// unless it is new).
fn build(set: &dyn TensorSet, pairs: &[(String, String)]) -> Result<Built, String> {
    // Each key named, numbered; what the set says of it, by number.
    // An edited set's keys: a renamed tensor is named by its new key, a dropped one not.
    let keys: Vec<Option<std::borrow::Cow<'_, [u8]>>> = pairs
        .iter()
        .map(|(_, k)| match set.renamed(k.as_bytes()) {
            None => Some(std::borrow::Cow::Borrowed(k.as_bytes())),
            Some(Some(new)) => Some(std::borrow::Cow::Owned(new)),
            Some(None) => None,
        })
        .collect();
    let mut slot_of: FxMap<&[u8], usize> = FxMap::default();
    slot_of.reserve(pairs.len());
    for k in keys.iter().flatten() {
        let n = slot_of.len();
        slot_of.entry(k.as_ref()).or_insert(n);
    }
    // Each key's position, dtype and the length of its path in `variables/` (no suffix).
    let mut found: Vec<Option<(u64, DType, usize)>> = vec![None; slot_of.len()];
    if !slot_of.is_empty() {
        walk(set, |p, k| {
            if let Some(&n) = slot_of.get(k) {
                // A tensor whose entry cannot be read has no dtype: no links to it.
                if let Ok(info) = set.info(p) {
                    let len = crate::fs::views::file_path(k, FileKind::Bin).len() - ".bin".len();
                    found[n] = Some((p, info.dtype, len));
                }
            }
            Ok(true)
        })
        .map_err(|e| e.to_string())?;
    }
    let mut b = Built {
        arena: Vec::new(),
        dirs: vec![Dir {
            parent: None,
            items: Vec::new(),
        }],
        leaves: Vec::new(),
    };
    // Directories by escaped path (`a/b`), `names/` itself being the empty path.
    let mut subdirs: FxMap<Vec<u8>, u32> = FxMap::default();
    let mut path = Vec::new();
    for ((name, _), key) in pairs.iter().zip(&keys) {
        let Some(key) = key else {
            continue;
        };
        let Some(&Some((pos, dtype, path_len))) =
            slot_of.get(key.as_ref()).and_then(|&n| found.get(n))
        else {
            continue;
        };
        let comps = escaped_path(name.as_bytes());
        let Some((leaf_name, dirs)) = comps.split_last() else {
            continue;
        };
        let mut dir = 0u32;
        path.clear();
        for c in dirs {
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(c);
            dir = match subdirs.get(path.as_slice()) {
                Some(&d) => d,
                None => {
                    let d = u32::try_from(b.dirs.len()).map_err(|_| "too many names")?;
                    b.dirs.push(Dir {
                        parent: Some(dir),
                        items: Vec::new(),
                    });
                    let name = b.push(c);
                    b.dirs[dir as usize].items.push(Item {
                        name,
                        child: Child::Dir(d),
                    });
                    subdirs.insert(path.clone(), d);
                    d
                }
            };
        }
        let l = u32::try_from(b.leaves.len()).map_err(|_| "too many names")?;
        let target_len = u32::try_from(3 * comps.len() + path_len).map_err(|_| "name too long")?;
        b.leaves.push(Leaf {
            dir,
            depth: u32::try_from(comps.len()).unwrap_or(u32::MAX),
            pos,
            dtype,
            target_len,
        });
        let name = b.push(leaf_name);
        b.dirs[dir as usize].items.push(Item {
            name,
            child: Child::Leaf(l),
        });
    }
    let Built {
        arena,
        mut dirs,
        leaves,
    } = b;
    for d in &mut dirs {
        d.items.sort_unstable_by(|x, y| {
            let (a, c) = (
                &arena[x.name.at..x.name.at + x.name.len],
                &arena[y.name.at..y.name.at + y.name.len],
            );
            a.cmp(c).then(x.child.cmp(&y.child))
        });
    }
    Ok(Built {
        arena,
        dirs,
        leaves,
    })
}

impl Built {
    fn push(&mut self, s: &[u8]) -> Span {
        let at = self.arena.len();
        self.arena.extend_from_slice(s);
        Span { at, len: s.len() }
    }

    fn name(&self, s: Span) -> &[u8] {
        self.arena.get(s.at..s.at + s.len).unwrap_or(&[])
    }

    /// The item of directory `d` named `name` that is a directory (`leaf` false) or a leaf.
    fn find(&self, d: u32, name: &[u8], leaf: bool) -> Option<Child> {
        let items = &self.dirs.get(d as usize)?.items;
        let rank = |c: &Child| matches!(c, Child::Leaf(_));
        let i = items.partition_point(|it| (self.name(it.name), rank(&it.child)) < (name, leaf));
        let it = items.get(i)?;
        (self.name(it.name) == name && rank(&it.child) == leaf).then_some(it.child)
    }
}

impl Subtree for NamesTree {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        // `names/` itself is there before the names are made (a `stat` or `ls -l` of its parent
        // makes nothing).
        if local == dir_local(0) {
            return Ok(NodeAttr {
                kind: Kind::Dir,
                size: Size::Known(0),
                meta: self.meta(),
            });
        }
        let b = self.built()?;
        Ok(match self.node(&b, local)? {
            Node::Dir(_) => NodeAttr {
                kind: Kind::Dir,
                size: Size::Known(0),
                meta: self.meta(),
            },
            Node::Link(l, kind) => {
                let leaf = b.leaves.get(l as usize).ok_or(FsError::NotFound)?;
                NodeAttr {
                    kind: Kind::Symlink,
                    size: Size::Known(u64::from(leaf.target_len) + kind.suffix().len() as u64),
                    meta: self.meta(),
                }
            }
        })
    }

    fn kind(&self, local: u64) -> FsResult<Kind> {
        if local == dir_local(0) {
            return Ok(Kind::Dir);
        }
        Ok(match self.node(&*self.built()?, local)? {
            Node::Dir(_) => Kind::Dir,
            Node::Link(..) => Kind::Symlink,
        })
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        let b = self.built()?;
        let Node::Dir(d) = self.node(&b, dir)? else {
            return Err(FsError::NotDir);
        };
        if let Some(Child::Dir(c)) = b.find(d, name, false) {
            return Ok(self.ino(dir_local(c)));
        }
        let (stem, kind) = FileKind::split(name).ok_or(FsError::NotFound)?;
        let Some(Child::Leaf(l)) = b.find(d, stem, true) else {
            return Err(FsError::NotFound);
        };
        let local = leaf_local(l, kind).ok_or(FsError::NotFound)?;
        self.node(&b, local)?;
        Ok(self.ino(local))
    }

    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        if dir == dir_local(0) {
            return Ok(Some(self.parent));
        }
        let b = self.built()?;
        Ok(Some(match self.node(&b, dir)? {
            Node::Dir(d) => self.dir_ino(b.dirs.get(d as usize).and_then(|x| x.parent)),
            Node::Link(l, _) => {
                let d = b.leaves.get(l as usize).map(|x| x.dir).unwrap_or(0);
                self.ino(dir_local(d))
            }
        }))
    }

    fn readdir(&self, dir: u64, c: u64, add: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
        let b = self.built()?;
        let Node::Dir(d) = self.node(&b, dir)? else {
            return Err(FsError::NotDir);
        };
        let items = &b.dirs.get(d as usize).ok_or(FsError::NotFound)?.items;
        let (start, sub_from) = if c < cookie::BASE {
            (0, 0)
        } else {
            let (p, s) = cookie::split(c);
            (p, s + 1)
        };
        let mut buf = Vec::new();
        for (i, it) in items.iter().enumerate().skip(start as usize) {
            let first = if i as u64 == start { sub_from } else { 0 };
            let name = b.name(it.name);
            match it.child {
                Child::Dir(cd) => {
                    if first > 0 {
                        continue;
                    }
                    let e = Entry {
                        ino: self.ino(dir_local(cd)),
                        name,
                        kind: Kind::Dir,
                        cookie: cookie::of(i as u64, 0).ok_or(FsError::NotFound)?,
                    };
                    if add(e) {
                        return Ok(());
                    }
                }
                Child::Leaf(l) => {
                    let dtype = b.leaves.get(l as usize).map(|x| x.dtype);
                    for (sub, kind) in tensor_files::files(dtype).iter().enumerate() {
                        if (sub as u64) < first {
                            continue;
                        }
                        buf.clear();
                        buf.extend_from_slice(name);
                        buf.extend_from_slice(kind.suffix().as_bytes());
                        let local = leaf_local(l, *kind).ok_or(FsError::NotFound)?;
                        let e = Entry {
                            ino: self.ino(local),
                            name: &buf,
                            kind: Kind::Symlink,
                            cookie: cookie::of(i as u64, sub as u64).ok_or(FsError::NotFound)?,
                        };
                        if add(e) {
                            return Ok(());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn open(&self, local: u64) -> FsResult<()> {
        self.node(&*self.built()?, local).map(|_| ())
    }

    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        let b = self.built()?;
        match self.node(&b, local)? {
            Node::Dir(_) => Err(FsError::IsDir),
            Node::Link(l, kind) => Ok(slice_of(&self.target(&b, l, kind)?, offset, size)),
        }
    }

    fn readlink(&self, local: u64) -> FsResult<Vec<u8>> {
        let b = self.built()?;
        match self.node(&b, local)? {
            Node::Link(l, kind) => self.target(&b, l, kind),
            Node::Dir(_) => Err(FsError::NotSymlink),
        }
    }
}
