//! A directory tree passed through as it is (a SavedModel's `assets/` and `assets.extra/`),
//! read lazily and confined to one root directory (the SavedModel's).
//!
//! [`PassTree`] is the seam: the filesystem core asks for one directory's entries at a time, by
//! location ([`Loc`], numbered by the tree; [`ROOT`] is the root directory), and opens files by
//! location. Nothing is read before it is asked for, so a deep or huge tree costs nothing until
//! it is listed.
//!
//! Two implementations:
//!
//! - [`LocalTree`] (the local filesystem). Nothing outside the root is ever listed, opened or
//!   served. Every directory is reached from the root's descriptor one name at a time with
//!   `O_NOFOLLOW` (so no symlink is ever followed on the way, and paths longer than `PATH_MAX`
//!   work), and checked to be the directory that was listed (device and inode). A symlink is
//!   resolved here, component by component inside the root: if it leads to a file or directory
//!   inside the root, the entry stands for that (followed); if it leaves the root at any point
//!   (an absolute target elsewhere, `..` above the root), dangles, or loops (more than
//!   [`MAX_HOPS`] symlinks, or [`MAX_STEPS`] path components), it stays a symlink, with its
//!   stored target. A file is opened by
//!   path and served only if it is the very file that was listed (device, inode, size and
//!   modification time), so a name swapped for a symlink after listing serves nothing.
//!   Descriptors are bounded: the root's, and at most [`DIR_FDS`] directories'.
//! - [`StoreTree`]: any [`Store`] through `list`/`open` (object stores, which have no
//!   symlinks).

use crate::sync::{lock, read_lock, write_lock};
use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use crate::parse::{FormatError, ReadAt};
use crate::source::bytes::{file_type, ByteSource, EntryKind, FileMeta, Store};
pub(crate) use crate::source::bytes::{Info, Loc, Node, PassTree, TreeEntry, What, ROOT};

// This thread's `errno`: Linux's `__errno_location`, macOS's and the BSDs' `__error`.
#[cfg(target_os = "linux")]
use libc::__errno_location as errno_location;
#[cfg(not(target_os = "linux"))]
use libc::__error as errno_location;

/// Symlinks followed while resolving one (the kernel's limit).
pub(crate) const MAX_HOPS: u32 = 40;
/// Path components walked while resolving one symlink (all the links it leads through
/// together): past this it is not followed (as a loop).
pub(crate) const MAX_STEPS: u32 = 4096;
/// Directory descriptors a [`LocalTree`] keeps open (besides the root's).
pub const DIR_FDS: usize = 16;
/// Locations one tree remembers; listing more fails (a guard on memory).
pub(crate) const MAX_LOCS: usize = 1 << 19;
/// Paths longer than this are opened through the parent directory's descriptor.
const LONG_PATH: usize = 3800;

fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// The error for a file or directory that is no longer the one listed.
fn changed() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "changed since it was listed (a different file is at its name now)",
    )
}

// ---------------------------------------------------------------------------------------------
// The local filesystem
// ---------------------------------------------------------------------------------------------

/// One location of a [`LocalTree`], as `lstat` saw it when listed.
#[derive(Debug, Clone)]
struct Rec {
    parent: Loc,
    name: OsString,
    dev: u64,
    ino: u64,
    dir: bool,
    mtime: (i64, i64),
    info: Info,
}

#[derive(Default)]
struct Locs {
    recs: Vec<Rec>,
    by_name: HashMap<(Loc, OsString), Loc>,
}

/// What resolving one symlink has cost so far.
#[derive(Default)]
struct Walked {
    hops: u32,
    steps: u32,
}

/// What `fstatat(..., AT_SYMLINK_NOFOLLOW)` said, in the terms used here.
struct Stat {
    kind: u32,
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    info: Info,
}

impl Stat {
    // `st_mode` is u16 on macOS, `st_dev` i32: the casts are for there.
    #[allow(clippy::unnecessary_cast)]
    fn of(st: &libc::stat) -> Stat {
        let (secs, nsec) = (st.st_mtime, st.st_mtime_nsec);
        let mtime = if secs >= 0 {
            std::time::UNIX_EPOCH.checked_add(std::time::Duration::new(
                secs as u64,
                nsec.clamp(0, 999_999_999) as u32,
            ))
        } else {
            std::time::UNIX_EPOCH.checked_sub(std::time::Duration::from_secs(secs.unsigned_abs()))
        };
        Stat {
            kind: st.st_mode as u32 & file_type::MASK,
            dev: st.st_dev as u64,
            ino: st.st_ino,
            mtime: (secs, nsec),
            info: Info {
                meta: FileMeta {
                    mtime: mtime.unwrap_or(std::time::UNIX_EPOCH),
                    uid: st.st_uid,
                    gid: st.st_gid,
                    mode: st.st_mode as u32,
                },
                len: u64::try_from(st.st_size).unwrap_or(0),
            },
        }
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| invalid("a name with a NUL byte"))
}

/// `fstat` of an open descriptor.
fn fstat(fd: &OwnedFd) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `fd` is an open descriptor; `st` is writable and fully written on success.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded.
    Ok(Stat::of(unsafe { &st.assume_init() }))
}

/// `lstat` of `name` in directory `dir` (a final symlink is not followed).
fn lstat_at(dir: &OwnedFd, name: &CStr) -> io::Result<Stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is an open descriptor, `name` a NUL-terminated string, `st` writable.
    let r = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded.
    Ok(Stat::of(unsafe { &st.assume_init() }))
}

/// Opens directory `name` of `dir` without following a symlink (and without blocking).
fn open_dir_at(dir: &OwnedFd, name: &CStr) -> io::Result<OwnedFd> {
    let flags =
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
    // SAFETY: `dir` is open and `name` NUL-terminated; the result is checked.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The target of symlink `name` in `dir`, as stored.
fn readlink_at(dir: &OwnedFd, name: &CStr) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: `buf` is writable for `buf.len()` bytes; readlinkat writes at most that many.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    if n >= buf.len() {
        return Err(invalid("symlink target longer than PATH_MAX"));
    }
    buf.truncate(n);
    Ok(buf)
}

/// The names in directory `dir` (without `.` and `..`), at most `max`; `true` if there were
/// more. Reads through a descriptor of its own, so `dir`'s offset is untouched.
fn read_names(dir: &OwnedFd, max: usize) -> io::Result<(Vec<OsString>, bool)> {
    struct Dir(*mut libc::DIR);
    impl Drop for Dir {
        fn drop(&mut self) {
            // SAFETY: the stream was opened by fdopendir and is closed once, here.
            unsafe { libc::closedir(self.0) };
        }
    }
    let own = open_dir_at(dir, c".")?;
    let raw = own.into_raw_fd();
    // SAFETY: `raw` is an open directory descriptor; on success the stream owns it.
    let d = unsafe { libc::fdopendir(raw) };
    if d.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: fdopendir failed, so `raw` is still ours to close.
        unsafe { libc::close(raw) };
        return Err(e);
    }
    let d = Dir(d);
    let mut out = Vec::new();
    loop {
        // SAFETY: errno is thread-local; readdir reports errors only through it.
        unsafe { *errno_location() = 0 };
        // SAFETY: `d.0` is an open directory stream used by this thread only.
        let e = unsafe { libc::readdir(d.0) };
        if e.is_null() {
            let err = io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(0) | None => Ok((out, false)),
                Some(_) => Err(err),
            };
        }
        // SAFETY: readdir returned an entry whose `d_name` is NUL-terminated; it stays valid
        // until the next readdir on this stream, and is copied before that.
        let name = unsafe { CStr::from_ptr((*e).d_name.as_ptr()) }.to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if out.len() >= max {
            return Ok((out, true));
        }
        out.push(OsStr::from_bytes(name).to_owned());
    }
}

/// A [`PassTree`] of the local filesystem (see the module docs).
pub(crate) struct LocalTree {
    /// The root as given (for messages).
    root: PathBuf,
    /// The root's absolute spellings (as given, and with every symlink resolved): an absolute
    /// symlink target under one of them is inside.
    abs: Vec<PathBuf>,
    root_fd: Arc<OwnedFd>,
    locs: RwLock<Locs>,
    /// Recently used directory descriptors, most recent last.
    fds: Mutex<Vec<(Loc, Arc<OwnedFd>)>>,
}

impl LocalTree {
    /// The tree under directory `root` (opened now; nothing else is read).
    pub(crate) fn open(root: &Path) -> io::Result<LocalTree> {
        let f = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK)
            .open(root)?;
        let fd = OwnedFd::from(f);
        let st = fstat(&fd)?;
        let mut abs = Vec::new();
        if let Ok(a) = std::path::absolute(root) {
            abs.push(a);
        }
        if let Ok(c) = std::fs::canonicalize(root) {
            if !abs.contains(&c) {
                abs.push(c);
            }
        }
        let rec = Rec {
            parent: ROOT,
            name: OsString::new(),
            dev: st.dev,
            ino: st.ino,
            dir: true,
            mtime: st.mtime,
            info: st.info,
        };
        Ok(LocalTree {
            root: root.to_path_buf(),
            abs,
            root_fd: Arc::new(fd),
            locs: RwLock::new(Locs {
                recs: vec![rec],
                by_name: HashMap::new(),
            }),
            fds: Mutex::new(Vec::new()),
        })
    }

    fn rec(&self, loc: Loc) -> io::Result<Rec> {
        let locs = read_lock(&self.locs);
        usize::try_from(loc)
            .ok()
            .and_then(|i| locs.recs.get(i))
            .cloned()
            .ok_or_else(|| invalid("no such location"))
    }

    /// The location of entry `name` of `dir` as `st` describes it (the same one as before if it
    /// is the same file).
    fn intern(&self, dir: Loc, name: &OsStr, st: &Stat) -> io::Result<Loc> {
        let mut locs = write_lock(&self.locs);
        let key = (dir, name.to_owned());
        if let Some(&l) = locs.by_name.get(&key) {
            if let Some(r) = usize::try_from(l).ok().and_then(|i| locs.recs.get(i)) {
                if r.dev == st.dev && r.ino == st.ino && r.mtime == st.mtime {
                    return Ok(l);
                }
            }
        }
        if locs.recs.len() >= MAX_LOCS {
            return Err(io::Error::other(format!(
                "more than {MAX_LOCS} files and directories listed"
            )));
        }
        let l = locs.recs.len() as Loc;
        locs.recs.push(Rec {
            parent: dir,
            name: name.to_owned(),
            dev: st.dev,
            ino: st.ino,
            dir: st.kind == file_type::DIR,
            mtime: st.mtime,
            info: st.info,
        });
        locs.by_name.insert(key, l);
        Ok(l)
    }

    fn cached_fd(&self, loc: Loc) -> Option<Arc<OwnedFd>> {
        if loc == ROOT {
            return Some(self.root_fd.clone());
        }
        let mut fds = lock(&self.fds);
        let i = fds.iter().position(|(l, _)| *l == loc)?;
        let e = fds.remove(i);
        let fd = e.1.clone();
        fds.push(e);
        Some(fd)
    }

    /// A descriptor of directory `loc`: opened from the nearest directory above it whose
    /// descriptor is at hand, one name at a time, never following a symlink, each checked to be
    /// the directory listed.
    fn dir_fd(&self, loc: Loc) -> io::Result<Arc<OwnedFd>> {
        if let Some(fd) = self.cached_fd(loc) {
            return Ok(fd);
        }
        let mut chain = Vec::new();
        let mut l = loc;
        let mut fd = loop {
            if let Some(fd) = self.cached_fd(l) {
                break fd;
            }
            let r = self.rec(l)?;
            if !r.dir {
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
            chain.push(r);
            l = chain.last().map_or(ROOT, |r| r.parent);
        };
        while let Some(r) = chain.pop() {
            let next = open_dir_at(&fd, &cstr(&r.name)?)?;
            let st = fstat(&next)?;
            if st.dev != r.dev || st.ino != r.ino {
                return Err(changed());
            }
            fd = Arc::new(next);
        }
        let mut fds = lock(&self.fds);
        if fds.len() >= DIR_FDS {
            fds.remove(0);
        }
        fds.push((loc, fd.clone()));
        Ok(fd)
    }

    /// What entry `name` of `dir` is; a symlink is resolved.
    fn what(&self, dir: Loc, dir_fd: &OwnedFd, name: &OsStr) -> io::Result<What> {
        let c = cstr(name)?;
        let st = lstat_at(dir_fd, &c)?;
        Ok(match st.kind {
            file_type::REG | file_type::DIR => {
                let node = Node {
                    loc: self.intern(dir, name, &st)?,
                    info: Some(st.info),
                };
                if st.kind == file_type::DIR {
                    What::Dir(node)
                } else {
                    What::File(node)
                }
            }
            file_type::LNK => {
                let target = readlink_at(dir_fd, &c)?;
                let mut walked = Walked::default();
                let to = self.resolve(dir, &target, &mut walked).and_then(|l| {
                    let r = self.rec(l).ok()?;
                    let node = Node {
                        loc: l,
                        info: Some(r.info),
                    };
                    let is_reg = r.info.meta.mode & file_type::MASK == file_type::REG;
                    (r.dir || is_reg).then_some((r.dir, node))
                });
                What::Link {
                    target,
                    meta: st.info.meta,
                    to,
                }
            }
            _ => What::Other,
        })
    }

    /// Where symlink target `target`, found in directory `dir`, leads: a location inside the
    /// root that is not a symlink, or `None` if it leaves the root at any point, does not
    /// exist, or takes more than [`MAX_HOPS`] symlinks.
    fn resolve(&self, dir: Loc, target: &[u8], walked: &mut Walked) -> Option<Loc> {
        walked.hops += 1;
        if walked.hops > MAX_HOPS || target.is_empty() {
            return None;
        }
        let t = Path::new(OsStr::from_bytes(target));
        let (mut cur, rest) = if t.is_absolute() {
            let rest = self.abs.iter().find_map(|a| t.strip_prefix(a).ok())?;
            (ROOT, rest)
        } else {
            (dir, t)
        };
        for comp in rest.components() {
            walked.steps += 1;
            if walked.steps > MAX_STEPS {
                return None;
            }
            match comp {
                Component::CurDir => {}
                Component::ParentDir => cur = self.parent(cur)?,
                Component::Normal(name) => {
                    let fd = self.dir_fd(cur).ok()?;
                    let c = cstr(name).ok()?;
                    let st = lstat_at(&fd, &c).ok()?;
                    cur = if st.kind == file_type::LNK {
                        let t = readlink_at(&fd, &c).ok()?;
                        self.resolve(cur, &t, walked)?
                    } else {
                        self.intern(cur, name, &st).ok()?
                    };
                }
                Component::RootDir | Component::Prefix(_) => return None,
            }
        }
        // `dir/` names a directory only.
        if target.ends_with(b"/") && !self.rec(cur).ok()?.dir {
            return None;
        }
        Some(cur)
    }
}

impl PassTree for LocalTree {
    fn entry(&self, dir: Loc, name: &OsStr) -> io::Result<Option<TreeEntry>> {
        let fd = self.dir_fd(dir)?;
        match self.what(dir, &fd, name) {
            Ok(what) => Ok(Some(TreeEntry {
                name: name.to_owned(),
                what,
            })),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, dir: Loc, max: usize) -> io::Result<(Vec<TreeEntry>, bool)> {
        let fd = self.dir_fd(dir)?;
        let (names, more) = read_names(&fd, max)?;
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.what(dir, &fd, &name) {
                Ok(what) => out.push(TreeEntry { name, what }),
                // Removed since the directory was read.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok((out, more))
    }

    fn info(&self, loc: Loc) -> io::Result<Info> {
        self.rec(loc).map(|r| r.info)
    }

    fn open(&self, file: Loc) -> io::Result<Arc<dyn ByteSource>> {
        let r = self.rec(file)?;
        let below = path_below(&self.locs, file);
        let path = self.root.join(&below);
        // The path from the root's absolute spelling when it is short; else through the
        // directory's descriptor. Either way the file opened must be the one listed.
        let abs = self.abs.last().map(|a| a.join(&below));
        let parent_fd;
        let open_path = match abs {
            Some(a) if a.as_os_str().len() < LONG_PATH => a,
            _ => {
                parent_fd = self.dir_fd(r.parent)?;
                let mut p = PathBuf::from(format!("/proc/self/fd/{}", parent_fd.as_raw_fd()));
                p.push(&r.name);
                p
            }
        };
        let (f, m) = crate::source::file::SourceFile::open(&open_path)?;
        if m.dev() != r.dev
            || m.ino() != r.ino
            || m.len() != r.info.len
            || (m.mtime(), m.mtime_nsec()) != r.mtime
        {
            return Err(changed());
        }
        Ok(Arc::new(Named {
            file: f,
            name: path,
        }))
    }

    fn parent(&self, loc: Loc) -> Option<Loc> {
        if loc == ROOT {
            return None;
        }
        let locs = read_lock(&self.locs);
        usize::try_from(loc)
            .ok()
            .and_then(|i| locs.recs.get(i))
            .map(|r| r.parent)
    }

    fn path(&self, loc: Loc) -> PathBuf {
        self.root.join(path_below(&self.locs, loc))
    }
}

/// The path of `loc` below the root.
fn path_below(locs: &RwLock<Locs>, loc: Loc) -> PathBuf {
    let locs = read_lock(locs);
    let mut names = Vec::new();
    let mut l = loc;
    while l != ROOT {
        let Some(r) = usize::try_from(l).ok().and_then(|i| locs.recs.get(i)) else {
            break;
        };
        names.push(r.name.as_os_str());
        l = r.parent;
    }
    names.iter().rev().collect()
}

/// An opened local file, named by its path in the tree (it may have been opened through a
/// descriptor's `/proc` path).
struct Named {
    file: Arc<crate::source::file::SourceFile>,
    name: PathBuf,
}

impl ReadAt for Named {
    fn len(&self) -> u64 {
        ReadAt::len(&*self.file)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<(), FormatError> {
        self.file.read_exact_at(buf, offset)
    }
}

impl ByteSource for Named {
    fn name(&self) -> &Path {
        &self.name
    }

    fn meta(&self) -> FileMeta {
        ByteSource::meta(&*self.file)
    }

    fn changed(&self) -> bool {
        self.file.changed()
    }

    fn read_vec(&self, offset: u64, len: usize) -> Result<Vec<u8>, FormatError> {
        self.file.read_vec(offset, len)
    }
}

// ---------------------------------------------------------------------------------------------
// Any store, by path
// ---------------------------------------------------------------------------------------------

/// A [`PassTree`] over a [`Store`]'s `list` and `open` (object stores: no symlinks).
pub(crate) struct StoreTree {
    store: Arc<dyn Store>,
    locs: RwLock<StoreLocs>,
}

/// Every location's `(parent, path)` (location 0 is the root), and the location of each path.
#[derive(Default)]
struct StoreLocs(Vec<(Loc, PathBuf)>, HashMap<PathBuf, Loc>);

impl StoreTree {
    /// The tree under `root` of `store`. Fails (`Unsupported`) where the store cannot list
    /// directories (plain HTTP): the root is listed once to find out.
    pub(crate) fn open(store: Arc<dyn Store>, root: &Path) -> io::Result<StoreTree> {
        store.list(root)?;
        Ok(StoreTree {
            store,
            locs: RwLock::new(StoreLocs(vec![(ROOT, root.to_path_buf())], HashMap::new())),
        })
    }

    fn loc_path(&self, loc: Loc) -> io::Result<PathBuf> {
        let locs = read_lock(&self.locs);
        usize::try_from(loc)
            .ok()
            .and_then(|i| locs.0.get(i))
            .map(|(_, p)| p.clone())
            .ok_or_else(|| invalid("no such location"))
    }

    fn intern(&self, dir: Loc, path: PathBuf) -> io::Result<Loc> {
        let mut locs = write_lock(&self.locs);
        if let Some(&l) = locs.1.get(&path) {
            return Ok(l);
        }
        if locs.0.len() >= MAX_LOCS {
            return Err(io::Error::other(format!(
                "more than {MAX_LOCS} files and directories listed"
            )));
        }
        let l = locs.0.len() as Loc;
        locs.0.push((dir, path.clone()));
        locs.1.insert(path, l);
        Ok(l)
    }

    fn what(&self, dir: Loc, path: PathBuf, kind: EntryKind) -> io::Result<What> {
        let node = |p| -> io::Result<Node> {
            Ok(Node {
                loc: self.intern(dir, p)?,
                info: None,
            })
        };
        Ok(match kind {
            EntryKind::File => What::File(node(path)?),
            EntryKind::Dir => What::Dir(node(path)?),
            EntryKind::Other => What::Other,
        })
    }
}

impl PassTree for StoreTree {
    fn entry(&self, dir: Loc, name: &OsStr) -> io::Result<Option<TreeEntry>> {
        let path = self.loc_path(dir)?.join(name);
        let Some(kind) = self.store.kind(&path) else {
            return Ok(None);
        };
        Ok(Some(TreeEntry {
            name: name.to_owned(),
            what: self.what(dir, path, kind)?,
        }))
    }

    fn list(&self, dir: Loc, max: usize) -> io::Result<(Vec<TreeEntry>, bool)> {
        let path = self.loc_path(dir)?;
        let mut entries = self.store.list(&path)?;
        let more = entries.len() > max;
        entries.truncate(max);
        let mut out = Vec::with_capacity(entries.len());
        for (name, kind) in entries {
            let what = self.what(dir, path.join(&name), kind)?;
            out.push(TreeEntry { name, what });
        }
        Ok((out, more))
    }

    fn info(&self, loc: Loc) -> io::Result<Info> {
        let path = self.loc_path(loc)?;
        match self.store.kind(&path) {
            Some(EntryKind::File) => {
                let f = self.store.open(&path)?;
                Ok(Info {
                    meta: f.meta(),
                    len: f.len(),
                })
            }
            _ => Ok(Info {
                meta: self.store.meta(&path)?,
                len: 0,
            }),
        }
    }

    fn open(&self, file: Loc) -> io::Result<Arc<dyn ByteSource>> {
        self.store.open(&self.loc_path(file)?)
    }

    fn parent(&self, loc: Loc) -> Option<Loc> {
        if loc == ROOT {
            return None;
        }
        let locs = read_lock(&self.locs);
        usize::try_from(loc)
            .ok()
            .and_then(|i| locs.0.get(i))
            .map(|(p, _)| *p)
    }

    fn path(&self, loc: Loc) -> PathBuf {
        self.loc_path(loc).unwrap_or_default()
    }
}
