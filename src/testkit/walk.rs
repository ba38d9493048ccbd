//! One tree walker for the filesystem core ([`Fs`], no kernel) and for a real directory (a mount,
//! through `std::fs`): the same traversal ([`walk`]) over a small [`Tree`] trait (list a directory,
//! read a file, read a link, get a node's key), returning every node below the root by its
//! `/`-joined path.
//!
//! Used by the core tests (`tests/core/fs_core.rs`), the real-mount tests (`walk_files` in
//! `tests/common/mod.rs`), the reference-model and layout tests, and the fuzz harness
//! ([`crate::testkit::fuzz`]).
//!
//! [`Core`] checks what the core promises while it lists, as strictly as its [`Mode`] says:
//! `Strict` for well-formed sources (every listed name looks up to the listed inode and kind,
//! `.` and `..` are right, getattr agrees with lookup, nothing is writable), `Lenient` for
//! damaged ones (the fuzz targets: a listed name looks up or fails as damaged, never as absent).

use std::collections::{BTreeMap, HashSet};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::FsError;
use crate::fs::{DirEntry, Fs, Kind, KEY_XATTR, ROOT};

/// A directory entry, resolved (looked up, or stat'ed).
#[derive(Debug, Clone)]
pub struct Listed<H> {
    /// The entry's name.
    pub name: Vec<u8>,
    pub(crate) kind: Kind,
    pub(crate) size: u64,
    pub(crate) handle: H,
}

/// What the walker needs of a tree.
pub trait Tree {
    /// How the tree names a node (an inode number, a path).
    type Handle: Clone;

    /// The root directory.
    fn root(&self) -> Self::Handle;

    /// A number that is the same for two handles of one directory (visits each once).
    fn id(&self, h: &Self::Handle) -> u64;

    /// The entries of directory `dir` (at `path`, below `parent`), without `.` and `..`.
    fn list(
        &self,
        dir: &Self::Handle,
        parent: &Self::Handle,
        path: &[u8],
    ) -> Vec<Listed<Self::Handle>>;

    /// A whole file whose listed size is `size`.
    fn read(&self, file: &Self::Handle, size: u64) -> Result<Vec<u8>, String>;

    /// A symlink's target.
    fn readlink(&self, link: &Self::Handle, path: &[u8]) -> Vec<u8>;

    /// The node's `user.tfmount.key`, if it has one.
    fn key(&self, _node: &Self::Handle) -> Option<Vec<u8>> {
        None
    }
}

/// One node found by [`walk`].
#[derive(Debug, Clone)]
pub struct Node<H> {
    /// Directory, file or symbolic link.
    pub kind: Kind,
    /// Its size as listed.
    pub size: u64,
    /// How the tree names it.
    pub handle: H,
    /// A symlink's target.
    pub link: Option<Vec<u8>>,
    /// `user.tfmount.key` (with [`Walk::keys`]).
    pub key: Option<Vec<u8>>,
    /// A file's bytes (with [`Walk::read`]).
    pub data: Option<Result<Vec<u8>, String>>,
}

/// What [`walk`] collects.
#[derive(Debug, Clone, Copy)]
pub struct Walk {
    /// Stop after this many listed entries.
    pub max_nodes: usize,
    /// Read every file.
    pub read: bool,
    /// Get every node's key.
    pub keys: bool,
}

impl Default for Walk {
    fn default() -> Self {
        Walk {
            max_nodes: usize::MAX,
            read: false,
            keys: false,
        }
    }
}

/// `dir/name` (`name` alone below the root, whose path is empty).
pub fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    if dir.is_empty() {
        return name.to_vec();
    }
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

/// A path or name as text, for messages (invalid UTF-8 replaced).
pub fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every node below the root of `tree`, by path (root-relative, `/`-joined, in bytes). Each
/// directory is listed once; symlinks are not followed.
pub fn walk<T: Tree>(tree: &T, opts: &Walk) -> BTreeMap<Vec<u8>, Node<T::Handle>> {
    let mut out = BTreeMap::new();
    let root = tree.root();
    let mut stack = vec![(Vec::new(), root.clone(), root)];
    let mut seen = HashSet::new();
    let mut nodes = 0usize;
    while let Some((path, dir, parent)) = stack.pop() {
        if nodes >= opts.max_nodes || !seen.insert(tree.id(&dir)) {
            continue;
        }
        for e in tree.list(&dir, &parent, &path) {
            nodes += 1;
            if nodes > opts.max_nodes {
                break;
            }
            let p = join(&path, &e.name);
            let link = (e.kind == Kind::Symlink).then(|| tree.readlink(&e.handle, &p));
            if let Some(l) = &link {
                // A symlink's size is its target's length (`ls -l`, `lstat`).
                assert_eq!(l.len() as u64, e.size, "{}: size vs readlink", show(&p));
            }
            let key = if opts.keys { tree.key(&e.handle) } else { None };
            let data = (opts.read && e.kind == Kind::File).then(|| tree.read(&e.handle, e.size));
            if e.kind == Kind::Dir {
                stack.push((p.clone(), e.handle.clone(), dir.clone()));
            }
            out.insert(
                p,
                Node {
                    kind: e.kind,
                    size: e.size,
                    handle: e.handle,
                    link,
                    key,
                    data,
                },
            );
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The filesystem core
// ---------------------------------------------------------------------------------------------

/// How [`Core`] treats what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A well-formed source: every operation succeeds and agrees with the others.
    Strict,
    /// A damaged source: operations may fail; what succeeds must agree.
    Lenient,
}

/// Which readdir cookies [`Core`] resumes a listing from, checking that it gives exactly the
/// entries after that one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// None: listings are read in one go only.
    None,
    /// The first, middle and last entries.
    Some,
    /// Every entry.
    Every,
}

/// An [`Fs`] as a [`Tree`]; handles are inode numbers.
pub struct Core<'a> {
    /// The core walked.
    pub fs: &'a Fs,
    /// Strict or lenient.
    pub mode: Mode,
    /// Which listings are also resumed from a cookie.
    pub resume: Resume,
    /// Bytes per `read` call (raised so no file takes more than 256 calls).
    pub read_size: usize,
    /// Files larger than this are not read whole (their `data` is an error).
    pub max_file_bytes: u64,
    /// Most entries taken from one listing.
    pub max_entries: usize,
}

/// Most `read` calls per file.
const MAX_READS_PER_FILE: u64 = 256;

impl<'a> Core<'a> {
    /// A walk of a well-formed source: no listing resumed, every file read whole in 4 KiB
    /// reads.
    pub fn strict(fs: &'a Fs) -> Self {
        Core {
            fs,
            mode: Mode::Strict,
            resume: Resume::None,
            read_size: 4096,
            max_file_bytes: u64::MAX,
            max_entries: usize::MAX,
        }
    }

    /// A walk of a damaged source: failures allowed, listings resumed from some cookies.
    pub fn lenient(fs: &'a Fs) -> Self {
        Core {
            mode: Mode::Lenient,
            resume: Resume::Some,
            ..Core::strict(fs)
        }
    }

    fn strict_checks(&self, dir: u64, parent: u64, path: &[u8], entries: &[DirEntry]) {
        let fs = self.fs;
        let dots: Vec<_> = entries
            .iter()
            .filter(|e| e.name == b"." || e.name == b"..")
            .collect();
        assert_eq!(dots.len(), 2, "{}: . and .. once each", show(path));
        assert_eq!(
            (&dots[0].name[..], dots[0].ino),
            (&b"."[..], dir),
            "{}",
            show(path)
        );
        assert_eq!(
            (&dots[1].name[..], dots[1].ino),
            (&b".."[..], parent),
            "{}",
            show(path)
        );
        assert_eq!(
            fs.lookup(dir, b"..").expect("..").ino,
            parent,
            "{}: lookup ..",
            show(path)
        );
        assert_eq!(fs.lookup(dir, b".").expect(".").ino, dir);
    }

    fn lenient_checks(&self, dir: u64, parent: u64) {
        if let Ok(a) = self.fs.getattr(dir) {
            assert_eq!(a.kind, Kind::Dir, "getattr of a directory");
            assert_eq!(a.ino, dir);
        }
        if let Ok(a) = self.fs.lookup(dir, b"..") {
            assert_eq!(a.ino, parent, "`..` of {dir:#x}");
        }
    }

    /// Listing again from the cookies [`Core::resume`] names gives exactly the entries after each.
    fn check_resume(&self, dir: u64, entries: &[DirEntry]) {
        let picks: Vec<usize> = match self.resume {
            Resume::None => return,
            Resume::Some => vec![0, entries.len() / 2, entries.len().saturating_sub(1)],
            Resume::Every => (0..entries.len()).collect(),
        };
        for k in picks.into_iter().filter(|&k| k < entries.len()) {
            let mut again = Vec::new();
            let r = self.fs.readdir(dir, entries[k].cookie, |e| {
                again.push((e.name, e.ino));
                false
            });
            if r.is_err() && self.mode == Mode::Lenient {
                continue;
            }
            r.unwrap_or_else(|e| panic!("readdir of {dir:#x} resumed after entry {k}: {e}"));
            let want: Vec<_> = entries[k + 1..]
                .iter()
                .map(|e| (e.name.clone(), e.ino))
                .collect();
            assert_eq!(again, want, "readdir resumed after entry {k} of {dir:#x}");
        }
    }
}

impl Tree for Core<'_> {
    type Handle = u64;

    fn root(&self) -> u64 {
        ROOT
    }

    fn id(&self, h: &u64) -> u64 {
        *h
    }

    fn list(&self, &dir: &u64, &parent: &u64, path: &[u8]) -> Vec<Listed<u64>> {
        let fs = self.fs;
        let strict = self.mode == Mode::Strict;
        if !strict {
            self.lenient_checks(dir, parent);
        }
        let mut entries: Vec<DirEntry> = Vec::new();
        let listed = fs.readdir(dir, 0, |e| {
            entries.push(e);
            entries.len() >= self.max_entries
        });
        if strict {
            if let Err(e) = &listed {
                panic!("readdir {}: {e}", show(path));
            }
            self.strict_checks(dir, parent, path, &entries);
        }
        if listed.is_ok() && entries.len() < self.max_entries {
            self.check_resume(dir, &entries);
        }
        let mut names = HashSet::new();
        for e in &entries {
            assert!(
                names.insert(&e.name[..]),
                "{}: {} listed twice",
                show(path),
                show(&e.name)
            );
        }
        let mut out = Vec::new();
        for e in entries {
            if e.name == b"." {
                assert_eq!(e.ino, dir);
                continue;
            }
            if e.name == b".." {
                continue;
            }
            let p = join(path, &e.name);
            // A listed name looks up. When damaged, it may fail as damaged (EIO: e.g. an
            // unrenderable graph file's size is unknown); never as "not found".
            let attr = match fs.lookup(dir, &e.name) {
                Ok(a) => a,
                Err(FsError::Corrupt { .. }) if !strict => continue,
                Err(err) => panic!("lookup {} after readdir: {err}", show(&p)),
            };
            assert_eq!(
                (attr.ino, attr.kind),
                (e.ino, e.kind),
                "{}: lookup and readdir disagree",
                show(&p)
            );
            if strict {
                let ga = fs.getattr(e.ino).expect("getattr");
                assert_eq!(
                    (ga.size, ga.kind),
                    (attr.size, attr.kind),
                    "{}: getattr vs lookup",
                    show(&p)
                );
                if attr.kind != Kind::Symlink {
                    assert_eq!(attr.perm & 0o222, 0, "{}: no write bits", show(&p));
                }
            } else {
                let _ = fs.listxattr(attr.ino);
                let _ = fs.getxattr(attr.ino, KEY_XATTR.as_bytes());
                let _ = fs.getxattr(attr.ino, b"user.other");
            }
            out.push(Listed {
                name: e.name,
                kind: attr.kind,
                size: attr.size,
                handle: attr.ino,
            });
        }
        out
    }

    /// Reads in [`Core::read_size`] pieces; each piece is at most what was asked, the whole is
    /// the listed size, and one read of everything gives the same bytes.
    fn read(&self, &ino: &u64, size: u64) -> Result<Vec<u8>, String> {
        let fs = self.fs;
        let cap = size.min(self.max_file_bytes);
        let step = (self.read_size as u64).max(cap / MAX_READS_PER_FILE + 1) as usize;
        let _ = fs.read(ino, u64::MAX - 1, 16);
        let mut out = Vec::new();
        loop {
            let piece = fs
                .read(ino, out.len() as u64, step)
                .map_err(|e| format!("read at {}: {e}", out.len()))?;
            assert!(piece.len() <= step, "read returned more than asked");
            if piece.is_empty() {
                break;
            }
            out.extend_from_slice(&piece);
            assert!(
                out.len() as u64 <= size,
                "reads return more than the getattr size {size}"
            );
            if out.len() as u64 > self.max_file_bytes {
                return Err(format!("larger than {} bytes", self.max_file_bytes));
            }
        }
        assert_eq!(
            out.len() as u64,
            size,
            "getattr size differs from the bytes read"
        );
        if let Ok(whole) = fs.read(ino, 0, out.len() + 1) {
            assert_same(
                &whole,
                &out,
                &format!("inode {ino:#x}: one read vs reads of {step} bytes"),
            );
        }
        Ok(out)
    }

    fn readlink(&self, &ino: &u64, path: &[u8]) -> Vec<u8> {
        self.fs
            .readlink(ino)
            .unwrap_or_else(|e| panic!("readlink of listed symlink {}: {e}", show(path)))
    }

    fn key(&self, &ino: &u64) -> Option<Vec<u8>> {
        self.fs.getxattr(ino, KEY_XATTR.as_bytes()).ok()
    }
}

// ---------------------------------------------------------------------------------------------
// A real directory
// ---------------------------------------------------------------------------------------------

/// A directory tree through `std::fs` (a real mount); handles are paths. Any failure to list or
/// stat panics, naming the path.
pub struct Dir {
    pub(crate) root: PathBuf,
}

impl Dir {
    /// The tree under `root`.
    pub fn new(root: &Path) -> Self {
        Dir {
            root: root.to_path_buf(),
        }
    }
}

impl Tree for Dir {
    type Handle = PathBuf;

    fn root(&self) -> PathBuf {
        self.root.clone()
    }

    fn id(&self, h: &PathBuf) -> u64 {
        std::fs::symlink_metadata(h)
            .unwrap_or_else(|e| panic!("{}: {e}", h.display()))
            .ino()
    }

    fn list(&self, dir: &PathBuf, _parent: &PathBuf, _path: &[u8]) -> Vec<Listed<PathBuf>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let e = e.unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
            let p = e.path();
            let meta = std::fs::symlink_metadata(&p)
                .unwrap_or_else(|err| panic!("{}: {err}", p.display()));
            let ft = meta.file_type();
            let kind = if ft.is_dir() {
                Kind::Dir
            } else if ft.is_symlink() {
                Kind::Symlink
            } else if ft.is_file() {
                Kind::File
            } else {
                continue; // sockets, FIFOs, devices: not something a mount shows
            };
            out.push(Listed {
                name: e.file_name().as_bytes().to_vec(),
                kind,
                size: meta.len(),
                handle: p,
            });
        }
        out
    }

    fn read(&self, file: &PathBuf, _size: u64) -> Result<Vec<u8>, String> {
        std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))
    }

    fn readlink(&self, link: &PathBuf, _path: &[u8]) -> Vec<u8> {
        std::fs::read_link(link)
            .unwrap_or_else(|e| panic!("{}: {e}", link.display()))
            .into_os_string()
            .into_vec()
    }
}

/// Equal byte strings, or a panic naming the first difference (not the whole buffers).
pub(crate) fn assert_same(a: &[u8], b: &[u8], what: &str) {
    if a == b {
        return;
    }
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let show = |s: &[u8]| {
        String::from_utf8_lossy(&s[at.min(s.len())..(at + 40).min(s.len())]).into_owned()
    };
    panic!(
        "{what}: differ at byte {at} (lengths {} and {}): {:?} vs {:?}",
        a.len(),
        b.len(),
        show(a),
        show(b)
    );
}
