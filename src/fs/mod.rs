//! The filesystem core: lookup, getattr, readdir, open, read, readlink and xattrs as plain Rust
//! results, with no FUSE types, so it is tested without the kernel and serves the CLI too.
//!
//! [`Fs`] is one dispatcher: it decodes an inode number once (`subtree | local`, see
//! [`crate::namespace::ino`]) and forwards to the type serving that subtree ([`subtree::Subtree`]):
//! the fixed nodes ([`fixed`]), a checkpoint's variables ([`variables`]), a meta graph's names
//! ([`graph`]), `names/` ([`names`]), a SavedModel's assets ([`assets`]). Building the tree at
//! mount time ([`build`], or [`live`] for a directory followed live) is apart from serving it. Every
//! failed operation is logged here, once, with what it concerns.

pub mod assets;
pub(crate) mod build;
pub(crate) mod edit;
pub(crate) mod fixed;
pub(crate) mod graph;
#[cfg(test)]
mod hostile_inodes;
pub(crate) mod keyspace;
pub(crate) mod live;
pub(crate) mod names;
pub(crate) mod registry;
pub(crate) mod string_text;
pub(crate) mod subtree;
pub(crate) mod tensor_files;
pub(crate) mod text;
pub(crate) mod variables;
pub(crate) mod views;

use crate::sync::read_lock;
use bytes::Bytes;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use crate::cache::Lru;
use crate::error::{FsError, FsResult, SourceError};
use crate::formats::caches::Caches;
use crate::formats::tensors::TensorSet;
use crate::namespace::ino::Ino;
use crate::probe::Probed;
use crate::source::bytes::{FileMeta, Store};
use crate::source::local::LocalStore;
use registry::Registry;
pub use subtree::DIRECT_IO_MIN;
pub(crate) use subtree::{Content, DirectIo};
use subtree::{NodeAttr, Size, Subtree};

pub(crate) use crate::namespace::ino::ROOT as ROOT_INO;
/// The root's inode number.
pub const ROOT: u64 = ROOT_INO.0;
/// The extended attribute holding the checkpoint key (or graph name) a file or directory
/// shows, as stored, unescaped.
pub const KEY_XATTR: &str = "user.tfmount.key";
/// The size a file whose content cannot be produced is listed with: above 0, so that reading
/// it reaches the daemon (and fails with EIO) even when the kernel opens files without asking.
pub(crate) const BROKEN_SIZE: u64 = 1;

/// What a mount shows and how it reads: the `-o` options the core needs (see `options.rs`,
/// the one table that interprets them).
#[derive(Debug, Clone)]
pub struct Options {
    /// Verify each tensor's CRC-32C the first time it is read.
    pub verify_crc: bool,
    /// Check every tensor before serving its first byte, also where it could be checked while
    /// streamed (object storage).
    pub crc_first: bool,
    /// Bytes of decoded index blocks to keep.
    pub cache_bytes: usize,
    /// Bytes of rendered text (`.pbtxt` files) to keep.
    pub text_cache_bytes: usize,
    /// The meta graph the top-level `graph`, `functions`, ... links point into, as a
    /// comma-separated tag set (else the only one, else the one tagged exactly `serve`).
    pub tags: Option<String>,
    /// Follow a checkpoint directory with a state file while mounted (see [`live`]).
    pub live: bool,
    /// How long a followed checkpoint that is not complete yet is waited for, counted from when
    /// its files last grew, before it is shown as it is (see [`live`]).
    pub live_grace: std::time::Duration,
    /// Edit the checkpoint (`-o edit[=DIR]`): its edits kept in this directory (an empty path:
    /// the default one, chosen by the mount from the source and mount point).
    pub edit: Option<std::path::PathBuf>,
    /// Read the edits of `edit` without making any (`tfmount.open(source, edits=DIR)`): the
    /// directory is not created or tidied, and the tree stays read-only.
    pub edit_read_only: bool,
    /// List the derived views (`text/`, `stats/`, `names/`, `dequantized/`, the safetensors
    /// files) in the directories that hold them. Off: they are reachable by path but not listed
    /// (docs/layout.md, "Listed and reachable").
    pub views_visible: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            verify_crc: true,
            crc_first: false,
            cache_bytes: 32 << 20,
            text_cache_bytes: 16 << 20,
            tags: None,
            live: true,
            live_grace: std::time::Duration::from_secs(10),
            views_visible: false,
            edit: None,
            edit_read_only: false,
        }
    }
}

/// What the kernel must forget after a change (a live directory's, an edit's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Invalidate {
    /// The name `name` in directory `parent`.
    Entry { parent: u64, name: Vec<u8> },
    /// The cached attributes and contents (a directory's listing, a symlink's target).
    Inode(u64),
}

/// What a node of the tree is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
}

/// A node's attributes, as `stat` shows them.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    /// The inode number.
    pub ino: u64,
    /// The size in bytes (a file's exact served length).
    pub size: u64,
    /// Directory, file or symbolic link.
    pub kind: Kind,
    pub(crate) perm: u16,
    pub(crate) mtime: SystemTime,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// The generation of `ino`: `(ino, generation)` names one node over the life of the mount
    /// (inode numbers of a live directory's pruned checkpoints are reused, see [`registry`]).
    pub(crate) generation: u64,
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub struct DirEntry {
    /// The entry's inode number.
    pub ino: u64,
    /// Its name in the directory (escaped as the layout contract says).
    pub name: Vec<u8>,
    /// Directory, file or symbolic link.
    pub kind: Kind,
    /// Pass this back to `readdir` to continue after this entry.
    pub cookie: u64,
    /// The generation of `ino` (see [`Attr::generation`]).
    pub(crate) generation: u64,
}

/// Inodes whose failures were logged at error level; later failures of the same inode are
/// logged at debug level (a damaged tensor read a thousand times logs one line).
const LOGGED_INODES: usize = 4096;

/// The tree a mount shows, without the kernel: every operation the FUSE adapter and the
/// engines need (attributes, lookup, listing, reads, links, extended attributes), by inode
/// number.
pub struct Fs {
    /// Every subtree instance, by id; subtree 0 holds the root.
    registry: Registry,
    /// The checkpoints of the mount, with the path of their tree's root relative to the mount.
    checkpoints: RwLock<Vec<(String, Arc<dyn TensorSet>)>>,
    caches: Arc<Caches>,
    texts: Arc<text::Texts>,
    opts: Options,
    logged: Lru<u64, ()>,
    /// A checkpoint directory followed while mounted (see [`live`]).
    live: Option<live::Live>,
    /// Where the source files live (kept for as long as the files it opened are served).
    store: Option<Arc<dyn Store>>,
    /// Inodes whose cached pages the kernel must drop (a tensor failed its streaming CRC check
    /// after some of its bytes were served), sent to a thread that tells the kernel.
    drop_pages: std::sync::OnceLock<std::sync::mpsc::SyncSender<u64>>,
    /// The edits of a mount made with `-o edit` ([`edit`]), and the inode of its `variables/`.
    edit: std::sync::OnceLock<Arc<edit::Editing>>,
    edit_root: std::sync::OnceLock<u64>,
}

fn file_perm(meta: &FileMeta) -> u16 {
    (meta.mode & 0o444) as u16
}

fn dir_perm(meta: &FileMeta) -> u16 {
    let r = meta.mode & 0o444;
    (r | (r >> 2)) as u16
}

/// The live tree of a checkpoint directory followed live (`-o live`, the default, on a local
/// directory), or `None` when `probed` is built once.
fn live_dir(
    fs: &Fs,
    store: &dyn Store,
    probed: &Probed,
    opts: &Options,
) -> Result<Option<live::Live>, SourceError> {
    let Probed::CheckpointDir {
        dir, checkpoints, ..
    } = probed
    else {
        return Ok(None);
    };
    let state_file = dir.join("checkpoint");
    if opts.live && store.is_file(&state_file) {
        return live::Live::open(fs, store, dir, Some(&state_file)).map(Some);
    }
    // Checkpoints that are one file each (Keras: one per epoch) appear whole: the
    // directory is followed by listing it. So is a directory with nothing in it yet.
    if opts.live && (checkpoints.is_empty() || checkpoints.iter().any(|(_, p)| store.is_file(p))) {
        return live::Live::open(fs, store, dir, None).map(Some);
    }
    if checkpoints.is_empty() {
        // A TF Serving base directory whose versions are all still being written says so.
        let what = crate::probe::serving::describe_dir(store, dir)
            .map(|w| format!(" ({w})"))
            .unwrap_or_default();
        return Err(SourceError::Invalid {
            path: dir.clone(),
            msg: format!("holds no model or checkpoint yet{what}; an empty directory is mounted and followed only live: a local directory, without -o nolive"),
        });
    }
    Ok(None)
}

impl Fs {
    /// Builds the tree of a probed local source (see [`build`]).
    pub fn new(probed: &Probed, opts: &Options) -> Result<Fs, SourceError> {
        Fs::with_store(Arc::new(LocalStore), probed, opts)
    }

    /// Builds the tree of a source probed in `store` (see [`crate::probe::open`]). Only local
    /// checkpoint directories are followed live.
    pub fn with_store(
        store: Arc<dyn Store>,
        probed: &Probed,
        opts: &Options,
    ) -> Result<Fs, SourceError> {
        let mut fs = Fs::empty(opts);
        // Set first: a checkpoint's subtrees built below and later (live) share it.
        fs.store = Some(store.clone());
        if let Some(live) = live_dir(&fs, &*store, probed, opts)? {
            fs.live = Some(live);
        } else {
            build::build_fixed(&mut fs, &store, probed)?;
        }
        Ok(fs)
    }

    fn empty(opts: &Options) -> Fs {
        Fs {
            registry: Registry::new(),
            checkpoints: RwLock::new(Vec::new()),
            caches: Caches::new(opts.cache_bytes),
            texts: Arc::new(text::Texts::new(opts.text_cache_bytes)),
            opts: opts.clone(),
            logged: Lru::new(LOGGED_INODES),
            live: None,
            store: None,
            drop_pages: std::sync::OnceLock::new(),
            edit: std::sync::OnceLock::new(),
            edit_root: std::sync::OnceLock::new(),
        }
    }

    fn sub(&self, ino: u64) -> FsResult<(Arc<dyn Subtree>, u64)> {
        let ino = Ino(ino);
        self.registry
            .get(ino.subtree())
            .map(|t| (t, ino.local()))
            .ok_or(FsError::NotFound)
    }

    /// [`Fs::sub`] and the generation of the subtree's slot.
    fn sub_gen(&self, ino: u64) -> FsResult<(Arc<dyn Subtree>, u64, u64)> {
        let ino = Ino(ino);
        self.registry
            .get_with_generation(ino.subtree())
            .map(|(t, generation)| (t, ino.local(), generation))
            .ok_or(FsError::NotFound)
    }

    /// Logs a failed operation once, here.
    fn logged<T>(&self, op: &str, ino: u64, r: FsResult<T>) -> FsResult<T> {
        if let Err(e) = &r {
            // One line per inode, also when two threads fail on it at once (the kernel's
            // read-ahead and the reader): the check and the insert are one step.
            if e.is_failure() && self.logged.insert_new(ino, (), 1) {
                log::error!("{op}: {e}");
            } else {
                log::debug!("{op} {ino:#x}: {e}");
            }
        }
        r
    }

    fn to_attr(ino: u64, generation: u64, a: NodeAttr) -> Attr {
        let (size, perm) = match (a.kind, a.size) {
            (Kind::Dir, _) => (0, dir_perm(&a.meta)),
            (Kind::Symlink, Size::Known(s)) => (s, 0o777),
            (_, Size::Known(s)) => (s, file_perm(&a.meta)),
            (_, Size::Broken) => (BROKEN_SIZE, file_perm(&a.meta)),
        };
        Attr {
            ino,
            size,
            kind: a.kind,
            perm,
            mtime: a.meta.mtime,
            uid: a.meta.uid,
            gid: a.meta.gid,
            generation,
        }
    }

    /// The attributes of node `ino`.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let (t, local, generation) = self.sub_gen(ino)?;
        if let Some(a) = self.pending_attr(t.as_ref(), ino, local, generation) {
            return a;
        }
        let a = self.logged("getattr", ino, t.attr(local))?;
        let mut a = Self::to_attr(ino, generation, a);
        if self.edit.get().is_some() && t.writable(local) {
            a.perm |= 0o200;
        }
        Ok(a)
    }

    fn parent_of(&self, ino: u64) -> FsResult<u64> {
        let (t, local) = self.sub(ino)?;
        t.parent(local)?.map(|p| p.0).ok_or(FsError::NotFound)
    }

    /// The node named `name` in directory `parent` (`.` and `..` included).
    pub fn lookup(&self, parent: u64, name: &[u8]) -> FsResult<Attr> {
        if name == b"." {
            return self.getattr(parent);
        }
        if name == b".." {
            return self.getattr(self.parent_of(parent)?);
        }
        let (t, local) = self.sub(parent)?;
        if t.kind(local)? != Kind::Dir {
            return Err(FsError::NotDir);
        }
        let child = match t.lookup(local, name) {
            Err(FsError::NotFound) if self.edit.get().is_some() => {
                match self.dropped_file(parent, name) {
                    Some(ino) => return self.getattr(ino),
                    None => return Err(FsError::NotFound),
                }
            }
            r => self.logged("lookup", parent, r)?,
        };
        self.getattr(child.0)
    }

    /// Lists `ino` from `cookie` (0 = start). `add` returns true when the reply is full.
    pub fn readdir(
        &self,
        ino: u64,
        cookie: u64,
        mut add: impl FnMut(DirEntry) -> bool,
    ) -> FsResult<()> {
        let (t, local) = self.sub(ino)?;
        if t.kind(local)? != Kind::Dir {
            return Err(FsError::NotDir);
        }
        let generation = |ino: u64| self.registry.generation(Ino(ino).subtree());
        let dot = |name: &[u8], ino, cookie| DirEntry {
            ino,
            name: name.to_vec(),
            kind: Kind::Dir,
            cookie,
            generation: generation(ino),
        };
        if cookie < 1 && add(dot(b".", ino, 1)) {
            return Ok(());
        }
        if cookie < 2 && add(dot(b"..", self.parent_of(ino)?, 2)) {
            return Ok(());
        }
        let r = t.readdir(local, cookie, &mut |e| {
            add(DirEntry {
                ino: e.ino.0,
                name: e.name.to_vec(),
                kind: e.kind,
                cookie: e.cookie,
                generation: generation(e.ino.0),
            })
        });
        self.logged("readdir", ino, r)
    }

    /// `readdir` with each entry's attributes (for READDIRPLUS, which saves the kernel a lookup
    /// per name). An entry whose attributes cannot be had comes with `None`, and so does a
    /// rendered text file: its size means rendering it, and listing a directory must not render
    /// everything in it. The kernel looks those up (and so renders them) only when used.
    pub fn readdir_plus(
        &self,
        ino: u64,
        cookie: u64,
        mut add: impl FnMut(DirEntry, Option<Attr>) -> bool,
    ) -> FsResult<()> {
        self.readdir(ino, cookie, |mut e| {
            let a = match self.sub_gen(e.ino) {
                Ok((t, local, generation)) => {
                    // The generation of the occupant the attributes come from.
                    e.generation = generation;
                    if t.rendered(local) {
                        None
                    } else {
                        t.attr(local)
                            .ok()
                            .map(|a| Self::to_attr(e.ino, generation, a))
                    }
                }
                Err(_) => None,
            };
            add(e, a)
        })
    }

    /// Checks that a file can be opened, and returns its attributes. A file whose content cannot
    /// be produced (a damaged tensor, an unrenderable message) fails here with EIO.
    pub fn open(&self, ino: u64) -> FsResult<Attr> {
        let (t, local) = self.sub(ino)?;
        self.logged("open", ino, t.open(local))?;
        self.getattr(ino)
    }

    /// What file `ino` holds (for how the kernel caches it: `-o direct_io`); no lookup of the
    /// index, no I/O.
    pub(crate) fn content(&self, ino: u64) -> Content {
        self.sub(ino)
            .map_or(Content::Other, |(t, local)| t.content(local))
    }

    /// Bytes `[offset, offset + size)` of a file, clamped to its end.
    pub fn read(&self, ino: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        let (t, local) = self.sub(ino)?;
        let r = t.read(local, offset, size);
        if let Err(FsError::Corrupt {
            source: crate::parse::FormatError::TensorCrc { .. },
            ..
        }) = &r
        {
            // Bytes of it may have been served before the check failed: the kernel drops what
            // it cached of the file (on another thread: the pages of this read are locked
            // until it is answered).
            if let Some(tx) = self.drop_pages.get() {
                let _ = tx.try_send(ino);
            }
        }
        self.logged("read", ino, r)
    }

    /// [`Fs::read`] for a FUSE reply: a file of tensor bytes (`.bin`, `.npy`, the composed
    /// files) is answered from the source file's own pages where it is local (a mapping:
    /// [`crate::source::mapped`]), which only the kernel's copy of the reply and this read's own
    /// checks touch. A read that touched a mapped page lost to a truncation is read again
    /// without the mapping, which finds the file changed: EIO, logged with its name, and for
    /// every read of the file after it.
    pub(crate) fn read_reply(&self, ino: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        if self.content(ino) == Content::Other {
            return self.read(ino, offset, size);
        }
        match crate::source::mapped::scope(|| self.read(ino, offset, size)) {
            (r, false) => r,
            (_, true) => self.read(ino, offset, size),
        }
    }

    /// Sets how the kernel is told to drop a file's cached pages (see [`Fs::read`]).
    pub(crate) fn set_page_dropper(&self, notify: Box<dyn Fn(live::Invalidate) + Send>) {
        let (tx, rx) = std::sync::mpsc::sync_channel::<u64>(64);
        if self.drop_pages.set(tx).is_err() {
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("drop-pages".into())
            .spawn(move || {
                // Ends when the filesystem (the sender) is dropped.
                while let Ok(ino) = rx.recv() {
                    notify(live::Invalidate::Inode(ino));
                }
            });
        if let Err(e) = spawned {
            log::warn!("cannot start the page-dropping thread: {e}");
        }
    }

    /// The target of symbolic link `ino`.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        let (t, local) = self.sub(ino)?;
        t.readlink(local)
    }

    /// The value of extended attribute `name` (see the README's layout contract).
    pub fn getxattr(&self, ino: u64, name: &[u8]) -> FsResult<Vec<u8>> {
        if let Some(v) = self.edit_xattr(ino, name) {
            return Ok(v);
        }
        let (t, local) = self.sub(ino)?;
        t.xattrs(local)?
            .into_iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, v)| v)
            .ok_or(FsError::NoAttr)
    }

    /// The names of a node's extended attributes, each followed by a NUL.
    pub fn listxattr(&self, ino: u64) -> FsResult<Vec<u8>> {
        let (t, local) = self.sub(ino)?;
        let mut out = Vec::new();
        if self.edit_xattr(ino, edit::EDITS_XATTR.as_bytes()).is_some() {
            out.extend_from_slice(edit::EDITS_XATTR.as_bytes());
            out.push(0);
        }
        for (n, _) in t.xattrs(local)? {
            out.extend_from_slice(n.as_bytes());
            out.push(0);
        }
        Ok(out)
    }

    /// Total bytes of the mounted checkpoints' source files, for `statfs`.
    pub(crate) fn total_bytes(&self) -> u64 {
        self.checkpoints()
            .iter()
            .map(|(_, c)| c.source_bytes())
            .sum()
    }

    /// The checkpoints of the mount now: the path of each one's tree relative to the mount root
    /// (empty for the root itself) and its tensors.
    pub(crate) fn checkpoints(&self) -> Vec<(String, Arc<dyn TensorSet>)> {
        read_lock(&self.checkpoints).clone()
    }

    /// The kernel is about to learn of `ino` in `generation` (a lookup or a listed entry):
    /// counted, for freeing pruned checkpoints of a live mount once the kernel forgot all their
    /// inodes. False if `ino`'s subtree was freed since it was resolved in `generation`: the
    /// entry must not be handed out (see [`registry`]).
    pub(crate) fn looked_up(&self, ino: u64, generation: u64) -> bool {
        self.registry.pin(Ino(ino).subtree(), generation)
    }

    /// Whether `ino` still names the node it named in `generation`: false once a live
    /// directory's pruned checkpoint freed its subtree (an NFS file handle is then stale).
    pub(crate) fn is_current(&self, ino: u64, generation: u64) -> bool {
        self.sub_gen(ino).is_ok_and(|(_, _, g)| g == generation)
    }

    /// The kernel forgot `n` lookups of `ino`.
    pub(crate) fn forget(&self, ino: u64, n: u64) {
        self.registry.forgot(Ino(ino).subtree(), n);
    }

    /// Starts following a live checkpoint directory (if this mount is one): `notify` is called
    /// with each cached name or inode the kernel must drop.
    pub(crate) fn follow(
        self: &Arc<Self>,
        notify: Box<dyn Fn(live::Invalidate) + Send>,
    ) -> std::io::Result<()> {
        live::follow(self, notify)
    }

    /// Applies changes of a live checkpoint directory now (what the watcher does on a change).
    #[cfg(test)]
    pub(crate) fn refresh_live(&self) -> Vec<live::Invalidate> {
        match &self.live {
            Some(l) => l.refresh(self, &LocalStore, true),
            None => Vec::new(),
        }
    }

    /// Whether the source is on object storage (reads may wait for the network).
    pub(crate) fn is_remote(&self) -> bool {
        self.store.as_ref().is_some_and(|s| s.is_remote())
    }

    /// What the source's store counted (requests, bytes fetched), for remote sources.
    pub(crate) fn store_stats(&self) -> Option<String> {
        self.store.as_ref()?.stats_line()
    }
}
