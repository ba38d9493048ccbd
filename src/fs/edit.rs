//! An editable mount (`-o edit[=DIR]`): the checkpoint's tensors as its edits leave them
//! ([`Edited`]), and the file operations that edit them, in key terms: `unlink` of any of a
//! tensor's files drops the tensor, `rmdir` drops an empty directory (the tensors under it went
//! one by one), `rename` renames a tensor or a directory's keys, and writing a whole `.npy`
//! (or a `.bin` of the tensor's size) gives a tensor new values. Each edit goes to the journal
//! of DIR ([`Journal`]) before the tree shows it; nothing of SOURCE is written.
//!
//! The kernel keeps names it looked up for a day: after an edit that gives a name another
//! tensor (a set: a new position; a rename) the names are invalidated ([`Invalidate`], sent by
//! the adapter's thread, never from inside a request on the same directory). A dropped tensor's
//! names are left to the kernel: `rm -r` lists a directory first and then removes each name it
//! listed, so the other files of a tensor it already dropped are removed again (that succeeds)
//! instead of being looked up (which fails: a dropped tensor is gone). Attributes are not kept
//! by the kernel in an editable mount (`tensors.tsv` and `summary.txt` change with each edit).

use crate::sync::lock;
use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::fixed::Generated;
use super::subtree::{Content, Named};
use super::{Attr, Fs, Invalidate};
use crate::error::{FsError, FsResult};
use crate::formats::edited::Edited;
use crate::formats::edits::{Journal, Record};
use crate::formats::tensors::TensorSet;
use crate::namespace::{self, FileKind};
use crate::parse::dtype::DType;

/// The root's extended attribute an editable mount names its edits directory in
/// (`tfmount edits MNT`, `tfmount commit MNT OUT` read it).
pub(crate) const EDITS_XATTR: &str = "user.tfmount.edits";
/// The root's extended attribute that, set, discards edits: the keys whose edits go, one per
/// line (none: all) (`tfmount edits --discard MNT`).
pub(crate) const DISCARD_XATTR: &str = "user.tfmount.discard";

/// Dropped keys remembered, so that removing another file of a dropped tensor succeeds.
const RECENT_DROPS: usize = 4096;
/// How long the other names of a dropped tensor (and of a directory it emptied) still resolve:
/// long enough for `rm -r` to reach them, short enough that they are soon gone.
const GHOST: std::time::Duration = std::time::Duration::from_secs(5);

/// A file being written: a temporary file of DIR/tensors/, checked and kept at flush.
struct Pending {
    key: Vec<u8>,
    kind: FileKind,
    tmp: PathBuf,
    /// The values file `tmp` becomes when kept (`tensors/N.npy`, [`Journal::new_tensor_file`]).
    name: String,
    file: std::fs::File,
    /// A file of another name (`tmpXYZ`, `.x.npy.swp`) in directory `.0` named `.1`: kept
    /// after it is closed, until it is renamed onto a tensor's `.npy` (what editors and
    /// atomic writers do) or removed.
    scratch: Option<(u64, Vec<u8>)>,
    /// The values file the last flush kept (`tmp` is then gone): a write after it starts a
    /// new temporary file from it.
    kept: Option<String>,
    /// Large writes handed to a thread of their own ([`Behind`]), none yet or drained.
    behind: Option<Behind>,
    /// The inode whose bytes the file starts as (opened for writing without `O_TRUNC`), not
    /// copied yet: copied at the first write, dropped by a truncation to 0.
    base: Option<u64>,
    /// Where a write at offset 0 lands in `tmp` (a `.bin`'s bytes follow an `.npy` header).
    at: u64,
    /// The `.bin`'s size, for a `.bin` (it must stay the tensor's).
    bin: Option<u64>,
    dirty: bool,
}

/// Writes of at least this many bytes go to the file being written from a thread of its own.
const BEHIND_MIN: usize = 256 << 10;
/// Such writes in flight at most (each one request's bytes, up to 1 MiB).
const BEHIND_DEPTH: usize = 4;

/// The writes of a file being written that a thread of its own puts into its temporary file,
/// in order, while the next WRITE is received: the copy into the file's pages overlaps the
/// kernel's copy of the next request (`cp` waits for each WRITE's reply). What failed is
/// reported when they are drained (the close, a truncation, a sync).
struct Behind {
    tx: std::sync::mpsc::SyncSender<(u64, Vec<u8>)>,
    done: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Behind {
    fn start(file: &std::fs::File) -> std::io::Result<Behind> {
        let f = file.try_clone()?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<(u64, Vec<u8>)>(BEHIND_DEPTH);
        let done = std::thread::Builder::new()
            .name("edit-write".into())
            .spawn(move || {
                let mut first = Ok(());
                while let Ok((at, data)) = rx.recv() {
                    if first.is_ok() {
                        first = f.write_all_at(&data, at);
                    }
                }
                first
            })?;
        Ok(Behind { tx, done })
    }

    /// Waits until every write handed over is in the file; the first that failed.
    fn drain(self) -> std::io::Result<()> {
        drop(self.tx);
        self.done
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the writing thread panicked")))
    }
}

/// Drains `p`'s writes handed to a thread, if any.
fn drain(p: &mut Pending) -> FsResult<()> {
    match p.behind.take() {
        Some(b) => b.drain().map_err(|er| io(&p.tmp, er)),
        None => Ok(()),
    }
}

/// The edit side of a mount made with `-o edit` ([`Fs::editing`]).
pub(crate) struct Editing {
    pub(crate) edited: Arc<Edited>,
    /// The TF2 object graph the checkpoint stores: a rename it cannot follow (export's rules)
    /// is refused at the rename.
    graph: Option<crate::proto::TrackableObjectGraph>,
    journal: Mutex<Journal>,
    recent: Mutex<VecDeque<(Vec<u8>, u64, std::time::Instant)>>,
    writes: Mutex<HashMap<u64, Arc<Mutex<Pending>>>>,
    /// Directories made (`mkdir`) that hold no tensor yet, by prefix: found by name (not
    /// listed) until a tensor is written or moved into them, or they are removed.
    made: Mutex<std::collections::HashSet<Vec<u8>>>,
    /// The handle last opened for writing on each inode (a truncation by the kernel names the
    /// inode, not the handle: `open(O_TRUNC)` is an OPEN and then a SETATTR).
    by_ino: Mutex<HashMap<u64, u64>>,
    /// Scratch files by directory and name, to their handle.
    scratch: Mutex<HashMap<(u64, Vec<u8>), u64>>,
    next_fh: AtomicU64,
    /// Where invalidations go (the FUSE adapter's thread); none without a kernel.
    notify: std::sync::OnceLock<std::sync::mpsc::Sender<Invalidate>>,
}

/// The error of an edit that cannot be done, logged once, in words.
fn refused(what: String, e: FsError) -> FsError {
    log::warn!("{what}");
    e
}

fn io(what: &Path, e: std::io::Error) -> FsError {
    log::error!("{}: {e}", what.display());
    FsError::Io(e)
}

impl Editing {
    /// The edits in `dir` (made if missing) over `set`, the checkpoint `source` names.
    pub(crate) fn open(
        set: Arc<dyn TensorSet>,
        graph: Option<crate::proto::TrackableObjectGraph>,
        dir: &Path,
        source: &str,
        read_only: bool,
    ) -> Result<Editing, String> {
        let journal = if read_only {
            Journal::read_for(dir, source)?
        } else {
            Journal::open(dir, source)?
        };
        let edited = Arc::new(Edited::new(set, journal.records(), dir)?);
        Ok(Editing {
            edited,
            graph,
            journal: Mutex::new(journal),
            recent: Mutex::new(VecDeque::new()),
            writes: Mutex::new(HashMap::new()),
            scratch: Mutex::new(HashMap::new()),
            made: Mutex::new(Default::default()),
            by_ino: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            notify: std::sync::OnceLock::new(),
        })
    }

    pub(crate) fn dir(&self) -> PathBuf {
        lock(&self.journal).dir().to_path_buf()
    }

    /// Refuses a rename the checkpoint's object graph cannot follow (EPERM, logged in words):
    /// `commit` would refuse it, as `export` refuses it.
    fn check_rename(&self, r: &Record) -> FsResult<()> {
        let Some(g) = &self.graph else {
            return Ok(());
        };
        let dir = self.dir();
        let after = self
            .edited
            .with_applied(r, &dir)
            .map_err(|e| refused(e, FsError::Invalid))?;
        let fate = |k: &str| {
            after
                .fate(k.as_bytes())
                .map(|f| f.map(|n| String::from_utf8_lossy(&n).into_owned()))
        };
        match crate::formats::v2::object_graph::edit(g, &fate) {
            Ok(_) => Ok(()),
            Err(why) => Err(refused(
                format!(
                    "{}: refused: the checkpoint's object graph cannot follow it ({why}); move whole objects (a directory above .ATTRIBUTES), keeping what follows them",
                    r.line()
                ),
                FsError::Perm,
            )),
        }
    }

    /// Journals `r` and applies it.
    fn record(&self, r: Record) -> FsResult<()> {
        if matches!(r, Record::Rename { .. }) {
            self.check_rename(&r)?;
        }
        let mut j = lock(&self.journal);
        let dir = j.dir().to_path_buf();
        // Checked first (a set's file read), so that the journal never holds what fails.
        self.edited
            .apply(&r, &dir)
            .map_err(|e| refused(e, FsError::Io(std::io::Error::other("edit failed"))))?;
        j.append(r.clone(), false).map_err(|e| {
            log::error!("{e}");
            FsError::Io(std::io::Error::other(e))
        })?;
        log::info!("edit: {}", r.line());
        Ok(())
    }

    fn remember_drop(&self, key: Vec<u8>, pos: u64) {
        let mut r = lock(&self.recent);
        if r.len() == RECENT_DROPS {
            r.pop_front();
        }
        r.push_back((key, pos, std::time::Instant::now()));
    }

    /// Where the tensor `key` was, when it was dropped lately.
    fn dropped_lately(&self, key: &[u8]) -> Option<u64> {
        let r = lock(&self.recent);
        r.iter()
            .rev()
            .take_while(|(_, _, t)| t.elapsed() < GHOST)
            .find(|(k, _, _)| k == key)
            .map(|(_, p, _)| *p)
    }

    fn notify(&self, inv: Vec<Invalidate>) {
        if let Some(n) = self.notify.get() {
            for i in inv {
                let _ = n.send(i);
            }
        }
    }

    /// Discards the edits naming `keys` (all without any): the journal rewritten, the edited
    /// set made anew from what is left. Returns how many went.
    pub(crate) fn discard(&self, keys: &[Vec<u8>]) -> Result<usize, String> {
        let mut j = lock(&self.journal);
        let n = j.discard(|r| !r.discarded_by(keys))?;
        self.edited.reset(j.records(), j.dir())?;
        Ok(n)
    }
}

/// A root file of the edited checkpoint (`tensors.tsv`, ...): made anew from the set after
/// each edit.
pub(crate) struct Versioned {
    edited: Arc<Edited>,
    make: Box<dyn Fn() -> Arc<dyn Generated> + Send + Sync>,
    now: Mutex<(u64, Arc<dyn Generated>)>,
}

impl Versioned {
    pub(crate) fn new(
        edited: Arc<Edited>,
        make: Box<dyn Fn() -> Arc<dyn Generated> + Send + Sync>,
    ) -> Versioned {
        let first = make();
        Versioned {
            now: Mutex::new((edited.version(), first)),
            edited,
            make,
        }
    }

    fn current(&self) -> Arc<dyn Generated> {
        let v = self.edited.version();
        let mut now = lock(&self.now);
        if now.0 != v {
            *now = (v, (self.make)());
        }
        now.1.clone()
    }
}

impl Generated for Versioned {
    fn size(&self) -> FsResult<u64> {
        self.current().size()
    }
    fn read(&self, offset: u64, size: usize) -> FsResult<bytes::Bytes> {
        self.current().read(offset, size)
    }
    fn content(&self) -> Content {
        self.current().content()
    }
    fn key(&self) -> Option<Vec<u8>> {
        self.current().key()
    }
}

/// The last component of `key`, and the prefix before it.
fn split_key(key: &[u8]) -> (&[u8], &[u8]) {
    match key.iter().rposition(|&b| b == b'/') {
        Some(i) => (&key[..=i], &key[i + 1..]),
        None => (&[], key),
    }
}

impl Fs {
    /// The edit side, when mounted with `-o edit`.
    pub(crate) fn editing(&self) -> Option<&Arc<Editing>> {
        self.edit.get()
    }

    /// Where invalidations of the kernel's names go once an edit changed what they name: a
    /// thread of their own (never from inside a request on the same directory).
    pub(crate) fn set_edit_notify(&self, notify: Box<dyn Fn(Invalidate) + Send>) {
        let Some(e) = self.editing() else {
            return;
        };
        let (tx, rx) = std::sync::mpsc::channel::<Invalidate>();
        if e.notify.set(tx).is_err() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("edit-inval".into())
            .spawn(move || {
                while let Ok(i) = rx.recv() {
                    notify(i);
                }
            });
        if let Err(er) = spawned {
            log::warn!("cannot start the invalidation thread: {er}");
        }
    }

    /// The attributes of a file being written (`ino` one [`Fs::create`] gave).
    pub(crate) fn pending_attr(
        &self,
        t: &dyn super::subtree::Subtree,
        ino: u64,
        local: u64,
        generation: u64,
    ) -> Option<FsResult<Attr>> {
        let e = self.editing()?;
        let fh = t.pending_of(local)?;
        let p = match e.pending(fh) {
            Ok(p) => p,
            Err(_) => return Some(Err(FsError::NotFound)),
        };
        let mut p = lock(&p);
        if let Err(er) = drain(&mut p) {
            return Some(Err(er));
        }
        let size = p
            .file
            .metadata()
            .map(|m| m.len().saturating_sub(p.at))
            .unwrap_or(0);
        let meta = e.edited.meta();
        Some(Ok(Attr {
            ino,
            size,
            kind: super::Kind::File,
            perm: ((meta.mode & 0o444) | 0o200) as u16,
            mtime: std::time::SystemTime::now(),
            uid: meta.uid,
            gid: meta.gid,
            generation,
        }))
    }

    /// The root's [`EDITS_XATTR`], on an editable mount.
    pub(crate) fn edit_xattr(&self, ino: u64, name: &[u8]) -> Option<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt;
        let e = self.editing()?;
        (ino == crate::namespace::ino::ROOT.0 && name == EDITS_XATTR.as_bytes())
            .then(|| e.dir().as_os_str().as_bytes().to_vec())
    }

    /// `setxattr`: on an editable mount's root, [`DISCARD_XATTR`] discards edits (ENODATA when
    /// keys were named and no edit names any of them); anything else is read-only.
    pub fn setxattr(&self, ino: u64, name: &[u8], value: &[u8]) -> FsResult<()> {
        let e = self.editing_or_ro()?;
        if ino != crate::namespace::ino::ROOT.0 || name != DISCARD_XATTR.as_bytes() {
            return Err(FsError::ReadOnly);
        }
        let keys: Vec<Vec<u8>> = value
            .split(|&b| b == b'\n')
            .filter(|k| !k.is_empty())
            .map(<[u8]>::to_vec)
            .collect();
        // The names the discarded edits touched: what they name changes back.
        let touched: Vec<(Vec<u8>, bool)> = {
            let j = lock(&e.journal);
            j.records()
                .iter()
                .filter(|r| r.discarded_by(&keys))
                .flat_map(|r| match r {
                    Record::Drop { key, subtree } => vec![(key.clone(), *subtree)],
                    Record::Set { key, .. } => vec![(key.clone(), false)],
                    Record::Rename { key, to, subtree } => {
                        vec![(key.clone(), *subtree), (to.clone(), *subtree)]
                    }
                })
                .collect()
        };
        let n = e.discard(&keys).map_err(|er| {
            log::error!("{er}");
            FsError::Io(std::io::Error::other(er))
        })?;
        log::info!("discarded {n} edits");
        if n == 0 && !keys.is_empty() {
            return Err(FsError::NoAttr);
        }
        let mut inv = Vec::new();
        if let Some(root) = self.edit_root.get() {
            for (k, dir) in touched {
                inv.extend(self.names_of(*root, &k, dir));
            }
        }
        e.notify(inv);
        Ok(())
    }

    /// A name of a tensor dropped lately, looked up: its file as it was (so that `rm -r`,
    /// which removes each name it listed, finds the other files of a tensor it dropped by one
    /// of them). Listings do not show them.
    pub(crate) fn dropped_file(&self, parent: u64, name: &[u8]) -> Option<u64> {
        let e = self.editing()?;
        if let Some(fh) = e.pending_named(parent, name) {
            return self.pending_ino(parent, fh).map(|a| a.ino);
        }
        let (t, local) = self.sub(parent).ok()?;
        match t.named(local, name).ok()? {
            Named::File {
                key,
                kind,
                pos: None,
            } => {
                let pos = e.dropped_lately(&key)?;
                t.tensor_file_ino(kind, pos).map(|i| i.0)
            }
            // A directory emptied lately (`rm -r` removes it last), or made and still empty.
            Named::Dir {
                prefix,
                exists: false,
            } => {
                let made = lock(&e.made).contains(&prefix);
                let emptied = made
                    || lock(&e.recent)
                        .iter()
                        .rev()
                        .take_while(|(_, _, t)| t.elapsed() < GHOST)
                        .any(|(k, _, _)| k.starts_with(&prefix));
                emptied.then_some(())?;
                t.dir_inos(&prefix)
                    .into_iter()
                    .find(|(_, variables)| *variables)
                    .map(|(i, _)| i.0)
            }
            _ => None,
        }
    }

    fn editing_or_ro(&self) -> FsResult<&Arc<Editing>> {
        self.editing().ok_or(FsError::ReadOnly)
    }

    fn named(&self, parent: u64, name: &[u8]) -> FsResult<Named> {
        let (t, local) = self.sub(parent)?;
        t.named(local, name)
    }

    /// The names the kernel may hold for the tensor `key` (its files in each view) and for the
    /// directory `key/`, in the directory of its prefix.
    fn names_of(&self, parent: u64, key: &[u8], dir: bool) -> Vec<Invalidate> {
        let Ok((t, _)) = self.sub(parent) else {
            return Vec::new();
        };
        let (prefix, last) = split_key(key);
        let mut out = Vec::new();
        for (ino, variables) in t.dir_inos(prefix) {
            let stem = namespace::escape(last, dir);
            if dir {
                out.push(Invalidate::Entry {
                    parent: ino.0,
                    name: stem,
                });
                continue;
            }
            let suffixes: Vec<&str> = if variables {
                FileKind::ALL.iter().map(|k| k.suffix()).collect()
            } else {
                vec![crate::namespace::names::TXT]
            };
            for s in suffixes {
                let mut n = stem.clone();
                n.extend_from_slice(s.as_bytes());
                out.push(Invalidate::Entry {
                    parent: ino.0,
                    name: n,
                });
            }
        }
        out
    }

    /// `unlink`: one of a tensor's files drops the tensor (all its files go); a scratch file
    /// goes.
    pub fn unlink(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        let e = self.editing_or_ro()?;
        if let Some(fh) = e.pending_named(parent, name) {
            lock(&e.scratch).remove(&(parent, name.to_vec()));
            let p = lock(&e.writes).remove(&fh);
            if let Some(p) = p {
                let _ = std::fs::remove_file(&lock(&p).tmp);
            }
            return Ok(());
        }
        match self.named(parent, name)? {
            Named::File {
                key, pos: Some(p), ..
            } => {
                e.record(Record::Drop {
                    key: key.clone(),
                    subtree: false,
                })?;
                e.remember_drop(key, p);
                Ok(())
            }
            // Another file of a tensor just dropped (`rm -r` removes each name it listed).
            Named::File { key, pos: None, .. } if e.dropped_lately(&key).is_some() => Ok(()),
            Named::File { .. } => Err(FsError::NotFound),
            Named::Dir { exists: true, .. } => Err(FsError::IsDir),
            Named::Dir { .. } => Err(FsError::NotFound),
        }
    }

    /// `rmdir`: a directory goes when nothing is left in it. One still holding tensors is
    /// ENOTEMPTY, as anywhere (`rm -r` removes the files first).
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> FsResult<()> {
        let e = self.editing_or_ro()?;
        match self.named(parent, name)? {
            Named::Dir { exists: true, .. } => Err(FsError::NotEmpty),
            // Emptied (its tensors were dropped; the kernel still held its name), or made.
            Named::Dir { prefix, .. } => {
                lock(&e.made).remove(&prefix);
                Ok(())
            }
            Named::File { .. } => Err(FsError::NotDir),
        }
    }

    /// `mkdir` in `variables/`: a directory to write or move tensors into. It is found by
    /// name from now on, and listed once a tensor is in it (a directory of the tree is the
    /// keys under it).
    pub fn mkdir(&self, parent: u64, name: &[u8]) -> FsResult<Attr> {
        let e = self.editing_or_ro()?;
        match self.named(parent, name)? {
            Named::Dir { exists: true, .. } => Err(FsError::Exists),
            Named::Dir { prefix, .. } => {
                let (t, _) = self.sub(parent)?;
                let ino = t
                    .dir_inos(&prefix)
                    .into_iter()
                    .find(|(_, variables)| *variables)
                    .map(|(i, _)| i.0)
                    .ok_or(FsError::Invalid)?;
                let fresh = lock(&e.made).insert(prefix);
                if !fresh {
                    return Err(FsError::Exists);
                }
                self.getattr(ino)
            }
            Named::File { pos: Some(_), .. } => Err(FsError::Exists),
            Named::File { .. } => Err(FsError::Invalid),
        }
    }

    /// `rename`: a tensor's file to another name of the same kind of file renames the tensor
    /// (replacing one there); a directory renames every key under it (onto a name that is not
    /// a directory holding tensors). Renaming one kind of file to another (`.npy` to `.bin`) is
    /// refused (EINVAL): the files are views of one tensor.
    pub fn rename(&self, parent: u64, name: &[u8], newparent: u64, newname: &[u8]) -> FsResult<()> {
        let e = self.editing_or_ro()?;
        if let Some(fh) = e.pending_named(parent, name) {
            return self.rename_pending(fh, newparent, newname);
        }
        let from = self.named(parent, name)?;
        let to = self.named(newparent, newname)?;
        let mut inv = Vec::new();
        match (from, to) {
            (
                Named::File {
                    key,
                    kind,
                    pos: Some(_),
                },
                Named::File {
                    key: key2,
                    kind: kind2,
                    ..
                },
            ) => {
                if kind != kind2 {
                    return Err(refused(
                        format!(
                            "rename {} to {}: a tensor's {} file renamed to a {} name (the files are views of one tensor: rename it by its {} file to another {} name)",
                            String::from_utf8_lossy(&key),
                            String::from_utf8_lossy(&key2),
                            kind.suffix(),
                            kind2.suffix(),
                            kind.suffix(),
                            kind.suffix()
                        ),
                        FsError::Invalid,
                    ));
                }
                if key == key2 {
                    return Ok(());
                }
                e.record(Record::Rename {
                    key: key.clone(),
                    to: key2.clone(),
                    subtree: false,
                })?;
                inv.extend(self.names_of(parent, &key, false));
                inv.extend(self.names_of(newparent, &key2, false));
            }
            (Named::File { pos: None, .. }, _) => return Err(FsError::NotFound),
            (Named::File { .. }, Named::Dir { .. }) => return Err(FsError::IsDir),
            (
                Named::Dir {
                    prefix,
                    exists: true,
                },
                Named::Dir {
                    prefix: prefix2,
                    exists,
                },
            ) => {
                if prefix2.starts_with(&prefix) {
                    return Err(FsError::Invalid);
                }
                if exists {
                    return Err(FsError::NotEmpty);
                }
                let (k, k2) = (&prefix[..prefix.len() - 1], &prefix2[..prefix2.len() - 1]);
                e.record(Record::Rename {
                    key: k.to_vec(),
                    to: k2.to_vec(),
                    subtree: true,
                })?;
                inv.extend(self.names_of(parent, k, true));
                inv.extend(self.names_of(newparent, k2, true));
            }
            (Named::Dir { exists: false, .. }, _) => return Err(FsError::NotFound),
            (Named::Dir { .. }, Named::File { .. }) => return Err(FsError::NotDir),
        }
        e.notify(inv);
        Ok(())
    }
}

impl Editing {
    /// The scratch file `name` in `parent`, if there is one.
    fn pending_named(&self, parent: u64, name: &[u8]) -> Option<u64> {
        lock(&self.scratch).get(&(parent, name.to_vec())).copied()
    }
}

impl Fs {
    /// A scratch file renamed onto a tensor's `.npy` (or `.bin`) name: checked and kept as the
    /// tensor's values, as a close of that file would; onto another scratch name, renamed.
    fn rename_pending(&self, fh: u64, newparent: u64, newname: &[u8]) -> FsResult<()> {
        let e = self.editing_or_ro()?;
        let p = e.pending(fh)?;
        let mut p = lock(&p);
        drain(&mut p)?;
        let old = p.scratch.clone();
        match self.named(newparent, newname)? {
            Named::File {
                key,
                kind: kind @ (FileKind::Npy | FileKind::Bin),
                pos,
            } => {
                let bin = match kind {
                    FileKind::Bin => {
                        let pos = pos.ok_or(FsError::NotFound)?;
                        Some(self.bin_of(e, &key, pos)?)
                    }
                    _ => None,
                };
                if let Some((_, h, _)) = &bin {
                    // A .bin's bytes: kept with the tensor's .npy header before them.
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut &p.file, &mut data)
                        .map_err(|er| io(&p.tmp, er))?;
                    let mut all = h.clone();
                    all.extend_from_slice(&data);
                    p.file.set_len(0).map_err(|er| io(&p.tmp, er))?;
                    p.file.write_all_at(&all, 0).map_err(|er| io(&p.tmp, er))?;
                    p.at = h.len() as u64;
                }
                p.key = key;
                p.kind = kind;
                p.bin = bin.map(|(_, _, n)| n);
                p.dirty = true;
                let r = self.keep_pending(e, &mut p);
                drop(p);
                if r.is_ok() {
                    if let Some(k) = old {
                        lock(&e.scratch).remove(&k);
                    }
                    lock(&e.writes).remove(&fh);
                }
                r
            }
            Named::Dir { exists: false, .. } | Named::File { .. } => {
                let mut sc = lock(&e.scratch);
                if let Some(k) = old {
                    sc.remove(&k);
                }
                sc.insert((newparent, newname.to_vec()), fh);
                p.scratch = Some((newparent, newname.to_vec()));
                Ok(())
            }
            Named::Dir { .. } => Err(FsError::IsDir),
        }
    }

    /// A tensor's `.bin` as a file written: its dtype, the `.npy` header its bytes follow, and
    /// its size.
    fn bin_of(&self, e: &Editing, key: &[u8], pos: u64) -> FsResult<(DType, Vec<u8>, u64)> {
        let info = e.edited.info(pos)?;
        let size = e.edited.open(pos)?.size();
        let h = crate::fs::tensor_files::npy_header(info.dtype, &info.shape).ok_or_else(|| {
            refused(
                format!(
                    "{}.bin: its dtype, {}, has no .npy form to keep new values in",
                    String::from_utf8_lossy(key),
                    info.dtype.display_name()
                ),
                FsError::Perm,
            )
        })?;
        Ok((info.dtype, h, size))
    }

    /// The file written through `fh` checked and, when it is whole, kept as the tensor's
    /// values (see [`Fs::flush_write`]).
    fn keep_pending(&self, e: &Editing, p: &mut Pending) -> FsResult<()> {
        p.dirty = false;
        drain(p)?;
        let what = format!("{}{}", String::from_utf8_lossy(&p.key), p.kind.suffix());
        let size = p.file.metadata().map_err(|er| io(&p.tmp, er))?.len();
        if let Some(want) = &p.bin {
            if size != p.at + want {
                return Err(refused(
                    format!(
                        "{what}: {} bytes written, the tensor's .bin is {want} (a .bin takes values of the same dtype and shape; write an .npy to change them); the tensor is left as it was",
                        size.saturating_sub(p.at)
                    ),
                    FsError::Invalid,
                ));
            }
        } else {
            let mut head = vec![0u8; crate::parse::npy::MAX_HEADER + 16];
            let n = read_full_at(&p.file, &mut head).map_err(|er| io(&p.tmp, er))?;
            head.truncate(n);
            if let Err(why) = crate::parse::npy::array(&head, size) {
                return Err(refused(
                    format!(
                        "{what}: not a complete .npy file: {why}; the tensor is left as it was"
                    ),
                    FsError::Invalid,
                ));
            }
        }
        // Kept under its own name, then the record naming it.
        let name = p.name.clone();
        lock(&e.journal).keep(&p.tmp, &name, false).map_err(|er| {
            log::error!("{er}");
            FsError::Io(std::io::Error::other(er))
        })?;
        p.kept = Some(name.clone());
        e.record(Record::Set {
            key: p.key.clone(),
            npy: name,
        })?;
        let inv = self.names_of_key(&p.key);
        e.notify(inv);
        Ok(())
    }

    /// A write after a flush kept the file: a new temporary file from what was kept.
    fn reopen_kept(&self, e: &Editing, p: &mut Pending) -> FsResult<()> {
        let Some(kept) = p.kept.take() else {
            return Ok(());
        };
        let (next, name) = lock(&e.journal).new_tensor_file();
        std::fs::copy(e.dir().join(&kept), &next).map_err(|er| io(&next, er))?;
        p.file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&next)
            .map_err(|er| io(&next, er))?;
        p.tmp = next;
        p.name = name;
        Ok(())
    }

    /// `create` of a new tensor file in a directory of `variables/`: only an `.npy` name (its
    /// array gives the dtype and shape). Returns the handle the writes go to and the file's
    /// attributes as the kernel sees it while it is written (empty).
    pub fn create(&self, parent: u64, name: &[u8]) -> FsResult<(u64, Option<Attr>)> {
        let e = self.editing_or_ro()?;
        match self.named(parent, name)? {
            Named::File {
                key,
                kind: FileKind::Npy,
                pos,
            } => {
                let fh = self.start_write(e, key, FileKind::Npy, pos, None)?;
                Ok((fh, self.pending_ino(parent, fh)))
            }
            Named::File {
                key,
                pos: Some(p),
                kind: kind @ FileKind::Bin,
            } => {
                let fh = self.start_write(e, key, kind, Some(p), None)?;
                Ok((fh, self.pending_ino(parent, fh)))
            }
            Named::File { key, .. } => Err(refused(
                format!(
                    "create {}: a new tensor is written as an .npy file (its dtype and shape come from its header)",
                    String::from_utf8_lossy(&key)
                ),
                FsError::Perm,
            )),
            // Another name: a scratch file, kept until it is renamed onto a tensor's `.npy`.
            Named::Dir { exists: false, .. } => {
                let fh = self.start_write(
                    e,
                    Vec::new(),
                    FileKind::Npy,
                    None,
                    Some((parent, name.to_vec())),
                )?;
                Ok((fh, self.pending_ino(parent, fh)))
            }
            Named::Dir { .. } => Err(FsError::IsDir),
        }
    }

    /// The attributes of the file being written through `fh`, under the subtree of `parent`.
    fn pending_ino(&self, parent: u64, fh: u64) -> Option<Attr> {
        let (t, _) = self.sub(parent).ok()?;
        let local = t.pending_local(fh)?;
        let ino =
            crate::namespace::ino::Ino::new(crate::namespace::ino::Ino(parent).subtree(), local)?;
        self.getattr(ino.0).ok()
    }

    /// `open` for writing of the file `ino` (an `.npy` or `.bin` of `variables/`): its bytes
    /// now copied to a temporary file unless `trunc`, written there, checked at flush.
    pub fn open_write(&self, ino: u64, trunc: bool) -> FsResult<u64> {
        let e = self.editing_or_ro()?;
        let (t, local) = self.sub(ino)?;
        let (key, kind, pos) = t.tensor_file(local)?;
        if !matches!(kind, FileKind::Npy | FileKind::Bin) {
            return Err(refused(
                format!(
                    "{}{}: derived from the tensor, never written (write its .npy)",
                    String::from_utf8_lossy(&key),
                    kind.suffix()
                ),
                FsError::Perm,
            ));
        }
        let fh = self.start_write(e, key, kind, Some(pos), None)?;
        lock(&e.by_ino).insert(ino, fh);
        let p = e.pending(fh)?;
        let mut p = lock(&p);
        // Nothing changes until something is written; the file's bytes as they are are copied
        // in at the first write that patches them (none when it is truncated first, as
        // `open(O_TRUNC)` is: an OPEN, then a SETATTR of size 0).
        p.dirty = false;
        if !trunc {
            p.base = Some(ino);
        }
        Ok(fh)
    }

    /// The file's bytes as they were opened, copied into the file being written before the
    /// first write that patches them.
    fn materialize(&self, p: &mut Pending) -> FsResult<()> {
        let Some(ino) = p.base.take() else {
            return Ok(());
        };
        let size = self.getattr(ino)?.size;
        let mut off = 0u64;
        while off < size {
            let b = self.read_reply(ino, off, (1usize << 20).min((size - off) as usize))?;
            if b.is_empty() {
                break;
            }
            p.file
                .write_all_at(&b, p.at + off)
                .map_err(|er| io(&p.tmp, er))?;
            off += b.len() as u64;
        }
        Ok(())
    }

    fn start_write(
        &self,
        e: &Editing,
        key: Vec<u8>,
        kind: FileKind,
        pos: Option<u64>,
        scratch: Option<(u64, Vec<u8>)>,
    ) -> FsResult<u64> {
        let bin = match kind {
            FileKind::Bin => Some(self.bin_of(e, &key, pos.ok_or(FsError::NotFound)?)?),
            _ => None,
        };
        let (tmp, name) = lock(&e.journal).new_tensor_file();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(|er| io(&tmp, er))?;
        let mut at = 0;
        if let Some((_, h, _)) = &bin {
            file.write_all_at(h, 0).map_err(|er| io(&tmp, er))?;
            at = h.len() as u64;
        }
        let fh = e.next_fh.fetch_add(1, Ordering::Relaxed);
        if let Some(k) = &scratch {
            lock(&e.scratch).insert(k.clone(), fh);
        }
        let p = Pending {
            key,
            kind,
            tmp,
            name,
            file,
            scratch,
            kept: None,
            base: None,
            behind: None,
            at,
            bin: bin.map(|(_, _, n)| n),
            dirty: true,
        };
        lock(&e.writes).insert(fh, Arc::new(Mutex::new(p)));
        Ok(fh)
    }

    /// `write` to a handle from [`Fs::create`] or [`Fs::open_write`].
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> FsResult<usize> {
        let e = self.editing_or_ro()?;
        let p = e.pending(fh)?;
        let mut p = lock(&p);
        self.reopen_kept(e, &mut p)?;
        self.materialize(&mut p)?;
        let at = p.at.checked_add(offset).ok_or(FsError::Invalid)?;
        p.dirty = true;
        if data.len() >= BEHIND_MIN {
            if p.behind.is_none() {
                p.behind = Some(Behind::start(&p.file).map_err(|er| io(&p.tmp, er))?);
            }
            if let Some(b) = &p.behind {
                if b.tx.send((at, data.to_vec())).is_ok() {
                    return Ok(data.len());
                }
            }
            // The thread ended (a write failed): the error comes from the drain.
        }
        drain(&mut p)?;
        p.file.write_all_at(data, at).map_err(|er| io(&p.tmp, er))?;
        Ok(data.len())
    }

    /// `truncate` through handle `fh`: the file being written cut (or grown) to `size`.
    pub fn truncate(&self, fh: u64, size: u64) -> FsResult<()> {
        let e = self.editing_or_ro()?;
        let p = e.pending(fh)?;
        let mut p = lock(&p);
        self.reopen_kept(e, &mut p)?;
        drain(&mut p)?;
        if size == 0 {
            p.base = None;
        } else {
            self.materialize(&mut p)?;
        }
        let len = p.at.checked_add(size).ok_or(FsError::Invalid)?;
        // Never cut to 0: ext4 (`auto_da_alloc`; XFS alike) marks a file truncated to 0 for a
        // flush of all it holds at its next close, which made the close after a 256 MiB `cp`
        // (an `O_TRUNC` open: a SETATTR of size 0 on the new, empty temporary) wait ~100 ms. An
        // empty file stays as it is; one with bytes is replaced by a new, empty one.
        let now = p.file.metadata().map_err(|er| io(&p.tmp, er))?.len();
        if len == 0 && now > 0 {
            std::fs::remove_file(&p.tmp).map_err(|er| io(&p.tmp, er))?;
            p.file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&p.tmp)
                .map_err(|er| io(&p.tmp, er))?;
        } else if now != len {
            p.file.set_len(len).map_err(|er| io(&p.tmp, er))?;
        }
        p.dirty = true;
        Ok(())
    }

    /// `truncate` of inode `ino` (no handle given): through the handle last opened for
    /// writing on it.
    pub fn truncate_ino(&self, ino: u64, size: u64) -> FsResult<()> {
        let e = self.editing_or_ro()?;
        let fh = lock(&e.by_ino).get(&ino).copied();
        match fh {
            Some(fh) if e.pending(fh).is_ok() => self.truncate(fh, size),
            _ => Err(FsError::ReadOnly),
        }
    }

    /// Whether `fh` is a handle of a file being written.
    pub fn is_writing(&self, fh: u64) -> bool {
        self.editing()
            .is_some_and(|e| lock(&e.writes).contains_key(&fh))
    }

    /// `flush` (each `close`) and `fsync`: what was written is checked and, when it is a whole
    /// `.npy` (or a `.bin` of the tensor's size), becomes the tensor's values; else the tensor
    /// stays as it was and the close fails (EINVAL), logged.
    pub fn flush_write(&self, fh: u64) -> FsResult<()> {
        let Some(e) = self.editing() else {
            return Ok(());
        };
        let Ok(p) = e.pending(fh) else {
            return Ok(());
        };
        let mut p = lock(&p);
        if !p.dirty || p.scratch.is_some() {
            return Ok(());
        }
        self.keep_pending(e, &mut p)
    }

    /// `fsync`: as a close (flush), and what the edits directory holds made to survive the
    /// machine.
    pub fn fsync_write(&self, fh: u64) -> FsResult<()> {
        self.flush_write(fh)?;
        let Some(e) = self.editing() else {
            return Ok(());
        };
        let kept = e.pending(fh).ok().and_then(|p| lock(&p).kept.clone());
        let j = lock(&e.journal);
        let dir = j.dir().to_path_buf();
        let mut files: Vec<PathBuf> = kept.iter().map(|k| dir.join(k)).collect();
        files.push(dir.join(crate::formats::edits::TENSORS));
        for f in files {
            if let Err(er) = std::fs::File::open(&f).and_then(|f| f.sync_all()) {
                return Err(io(&f, er));
            }
        }
        j.sync().map_err(|er| {
            log::error!("{er}");
            FsError::Io(std::io::Error::other(er))
        })
    }

    /// `release`: the handle's temporary file goes (what was kept stays).
    pub fn release_write(&self, fh: u64) {
        if let Some(e) = self.editing() {
            let p = lock(&e.writes).remove(&fh);
            lock(&e.by_ino).retain(|_, f| *f != fh);
            if let Some(p) = p {
                let scratch = lock(&p).scratch.is_some();
                if scratch {
                    // Kept for the rename that makes it a tensor's values.
                    lock(&e.writes).insert(fh, p);
                } else {
                    let mut p = lock(&p);
                    let _ = drain(&mut p);
                    if p.kept.is_none() {
                        let _ = std::fs::remove_file(&p.tmp);
                    }
                }
            }
        }
    }

    /// The kernel's names of the tensor `key`, found from the root of `variables/`.
    fn names_of_key(&self, key: &[u8]) -> Vec<Invalidate> {
        let Some(root) = self.edit_root.get() else {
            return Vec::new();
        };
        self.names_of(*root, key, false)
    }
}

impl Editing {
    fn pending(&self, fh: u64) -> FsResult<Arc<Mutex<Pending>>> {
        lock(&self.writes).get(&fh).cloned().ok_or(FsError::Invalid)
    }
}

/// Reads from offset 0 into `buf` until it is full or the file ends.
fn read_full_at(f: &std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The default edits directory of a mount of `source` on `mountpoint`: under the user's cache
/// directory, named for both.
pub(crate) fn default_dir(cache: &Path, source: &str, mountpoint: &Path) -> PathBuf {
    let name = Path::new(source)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "source".into());
    let mut id = format!("{source}\0{}", mountpoint.display()).into_bytes();
    id.truncate(4096);
    let h = namespace::fnv1a64(&id);
    cache.join("edits").join(format!("{name}-{h:016x}"))
}
