//! A SOURCE opened without a mount: the one adapter between the engines (and the subcommands and
//! the Python module over them) and the rest of the crate. Everything `ls`, `cat`,
//! `verify` and `diff` know about sources, the filesystem core and checkpoints goes through the
//! small types here:
//!
//! - [`Tree`]: the tree a mount would show (`ls`, `cat`), over [`crate::fs::Fs`] with no kernel;
//! - [`CheckpointSet`] and [`Ckpt`]: the checkpoints of a SOURCE, walked key by key in index order
//!   ([`Ckpt::walk`] yields [`Item`]s), with each tensor as a [`TensorInfo`], its stored pieces as
//!   [`Piece`]s (one per slice for a partitioned tensor), and the reads `verify` and `diff` need.
//!   Every byte read from a data shard through a `Ckpt` is counted ([`Ckpt::data_bytes_read`]).
//!
//! Each checkpoint is checked through its format's [`crate::formats::integrity::Integrity`]
//! (V2's stored CRC-32Cs and index, or the generic walk over any `TensorSet`).
//!
//! When the core is restructured, only this file needs to follow.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::FsError;
use crate::formats::caches::Caches;
use crate::formats::integrity::{Generic, Integrity};
use crate::formats::names::{LazyNames, Names};
use crate::formats::{OpenCtx, Opened};
use crate::fs::{Fs, Kind, Options, ROOT};
use crate::probe::{serving, Probed};
use crate::source::bytes::Store;
use crate::source::local::LocalStore;
use crate::{formats, probe};

pub(crate) use crate::formats::integrity::{Entry as TensorInfo, Item, Piece, Walk};
pub(crate) use crate::formats::v2::show_extent;

/// Bytes of decoded index blocks kept per source.
const CACHE_BYTES: usize = 32 << 20;
/// Symbolic links followed while resolving one path (as the kernel's limit).
const MAX_LINKS: usize = 40;

// ---------------------------------------------------------------------------------------------
// The tree (ls, cat)
// ---------------------------------------------------------------------------------------------

/// The tree a mount of a SOURCE shows.
pub struct Tree {
    fs: Fs,
}

/// What a [`Node`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
}

/// A file, directory or symbolic link of a [`Tree`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    id: u64,
    /// Directory, file or symbolic link.
    pub kind: NodeKind,
}

impl Node {
    /// Its inode number in the [`Fs`] under the tree.
    #[cfg(feature = "python")]
    pub(crate) fn ino(self) -> u64 {
        self.id
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The entry's name (escaped as the tree shows it).
    pub name: Vec<u8>,
    /// The node it names.
    pub node: Node,
}

/// Why a path or a file of a [`Tree`] cannot be used.
#[derive(Debug)]
pub enum TreeError {
    /// No such path in the tree.
    NotFound,
    /// A path goes through something that is not a directory, or a directory was expected.
    NotDir,
    /// A file was expected and the path names a directory.
    IsDir,
    /// Too many symbolic links, or one that leaves the tree.
    BadLink(&'static str),
    /// What a mount answers with EIO: the message names the tensor and the source file.
    Damaged(String),
    /// Any other failure of the tree under it, in words.
    Other(String),
}

impl std::fmt::Display for TreeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TreeError::NotFound => f.write_str("no such file or directory"),
            TreeError::NotDir => f.write_str("not a directory"),
            TreeError::IsDir => f.write_str("is a directory"),
            TreeError::BadLink(why) => f.write_str(why),
            TreeError::Damaged(m) => write!(f, "input/output error: {m}"),
            TreeError::Other(m) => f.write_str(m),
        }
    }
}

impl From<FsError> for TreeError {
    fn from(e: FsError) -> Self {
        match e {
            FsError::NotFound => TreeError::NotFound,
            FsError::NotDir => TreeError::NotDir,
            FsError::IsDir => TreeError::IsDir,
            e @ FsError::Corrupt { .. } => TreeError::Damaged(e.to_string()),
            e if e.errno() == libc::EIO => TreeError::Damaged(e.to_string()),
            e => TreeError::Other(e.to_string()),
        }
    }
}

fn node_kind(k: Kind) -> NodeKind {
    match k {
        Kind::Dir => NodeKind::Dir,
        Kind::File => NodeKind::File,
        Kind::Symlink => NodeKind::Symlink,
    }
}

impl Tree {
    /// Opens SOURCE as a mount would (tensor CRCs checked when read). The error is one line
    /// naming the path.
    pub fn open(source: &Path) -> Result<Tree, String> {
        let src = open_source(source)?;
        // Lists what a mount lists: views as TFMOUNT_VIEWS says (hidden by default).
        let settings = crate::options::settings(&[])?;
        let opts = Options {
            cache_bytes: CACHE_BYTES,
            live: false,
            views_visible: settings.fs.views_visible,
            ..Options::default()
        };
        let fs = Fs::with_store(src.store, &src.probed, &opts).map_err(|e| e.to_string())?;
        Ok(Tree { fs })
    }

    /// The tree of an `Fs` built elsewhere (the Python module's, with its options).
    #[cfg(feature = "python")]
    pub(crate) fn from_fs(fs: Fs) -> Tree {
        Tree { fs }
    }

    /// The filesystem core under this tree.
    #[cfg(feature = "python")]
    pub(crate) fn fs(&self) -> &Fs {
        &self.fs
    }

    /// The tree's root directory.
    pub fn root(&self) -> Node {
        Node {
            id: ROOT,
            kind: NodeKind::Dir,
        }
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> Result<Node, TreeError> {
        let a = self.fs.lookup(dir, name)?;
        Ok(Node {
            id: a.ino,
            kind: node_kind(a.kind),
        })
    }

    /// The node at `path` (relative to the root; `.`, `..` and empty components allowed),
    /// following symbolic links as the kernel would; the last component's link too when
    /// `follow_last`.
    pub fn resolve(&self, path: &[u8], follow_last: bool) -> Result<Node, TreeError> {
        let mut todo: std::collections::VecDeque<Vec<u8>> = path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
            .map(|c| c.to_vec())
            .collect();
        let mut cur = self.root();
        let mut links = 0usize;
        while let Some(comp) = todo.pop_front() {
            if cur.kind != NodeKind::Dir {
                return Err(TreeError::NotDir);
            }
            let next = self.lookup(cur.id, &comp)?;
            if next.kind == NodeKind::Symlink && (follow_last || !todo.is_empty()) {
                links += 1;
                if links > MAX_LINKS {
                    return Err(TreeError::BadLink("too many levels of symbolic links"));
                }
                let target = self.fs.readlink(next.id)?;
                if target.first() == Some(&b'/') {
                    return Err(TreeError::BadLink(
                        "symbolic link to an absolute path (outside the source)",
                    ));
                }
                // Resolved from the directory holding the link.
                for c in target
                    .split(|&b| b == b'/')
                    .filter(|c| !c.is_empty() && *c != b".")
                    .rev()
                {
                    todo.push_front(c.to_vec());
                }
                continue;
            }
            cur = next;
        }
        Ok(cur)
    }

    /// Size in bytes (files; a link's target length; 0 for directories). For a tensor file
    /// whose size cannot be known this is 0, as a mount lists it.
    pub(crate) fn size(&self, n: Node) -> Result<u64, TreeError> {
        Ok(self.fs.getattr(n.id)?.size)
    }

    /// The entries of directory `dir` in readdir order, without `.` and `..`.
    pub fn list(&self, dir: Node) -> Result<Vec<Listed>, TreeError> {
        if dir.kind != NodeKind::Dir {
            return Err(TreeError::NotDir);
        }
        let mut out = Vec::new();
        self.fs.readdir(dir.id, 0, |e| {
            if e.name != b"." && e.name != b".." {
                out.push(Listed {
                    node: Node {
                        id: e.ino,
                        kind: node_kind(e.kind),
                    },
                    name: e.name,
                });
            }
            false
        })?;
        Ok(out)
    }

    /// Opens a file for reading as a mount does (failing where opening it there fails with EIO);
    /// returns its size.
    pub fn open_file(&self, n: Node) -> Result<u64, TreeError> {
        match n.kind {
            NodeKind::Dir => return Err(TreeError::IsDir),
            NodeKind::Symlink => return Err(TreeError::Other("a symbolic link".into())),
            NodeKind::File => {}
        }
        Ok(self.fs.open(n.id)?.size)
    }

    /// Bytes `[offset, offset + len)` of a file (fewer at its end).
    /// At most `len` bytes of file `n` from `offset` (fewer at its end).
    pub fn read(&self, n: Node, offset: u64, len: usize) -> Result<Vec<u8>, TreeError> {
        let b = self.fs.read(n.id, offset, len)?;
        Ok(b.to_vec())
    }

    /// The target of symbolic link `n`.
    pub fn readlink(&self, n: Node) -> Result<Vec<u8>, TreeError> {
        Ok(self.fs.readlink(n.id)?)
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (verify, diff)
// ---------------------------------------------------------------------------------------------

/// The checkpoints of a SOURCE: `(name, prefix, opened checkpoint)`. `name` is what keys are
/// shown under: empty for a single checkpoint, `DIR_NAME/` in a checkpoint directory.
pub(crate) struct CheckpointSet {
    pub(crate) members: Vec<Member>,
}

pub(crate) struct Member {
    pub name: String,
    pub(crate) opened: Result<Ckpt, String>,
}

/// Why a SOURCE cannot be used as checkpoints.
#[derive(Debug)]
pub(crate) enum SourceProblem {
    /// Missing, unrecognised, or its only checkpoint cannot be opened.
    Unusable(String),
    /// A valid source without any checkpoint (a graph file).
    NoCheckpoint(String),
}

impl std::fmt::Display for SourceProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SourceProblem::Unusable(m) | SourceProblem::NoCheckpoint(m) => f.write_str(m),
        }
    }
}

impl CheckpointSet {
    /// Every checkpoint of SOURCE: one checkpoint (any format), the variables of a SavedModel
    /// (none if it has no variables), or every checkpoint of a checkpoint directory. A single
    /// checkpoint that cannot be opened makes the source unusable; in a directory it is a
    /// failed member.
    pub(crate) fn open(source: &Path) -> Result<CheckpointSet, SourceProblem> {
        let src = open_source(source).map_err(SourceProblem::Unusable)?;
        let (store, probed) = (src.store, src.probed);
        let cache = Caches::new(CACHE_BYTES);
        let single = |opened: Result<Ckpt, String>| -> Result<CheckpointSet, SourceProblem> {
            let ck = opened.map_err(SourceProblem::Unusable)?;
            Ok(CheckpointSet {
                members: vec![Member {
                    name: String::new(),
                    opened: Ok(ck),
                }],
            })
        };
        match probed {
            Probed::Checkpoint(found) => single(Ckpt::opened(
                &store,
                found.format.open(&ctx(&store, &cache), &found),
            )),
            Probed::SavedModel {
                variables: Some(p), ..
            } => single(Ckpt::open_path(&store, &p, &cache)),
            Probed::SavedModel {
                variables: None, ..
            } => Ok(CheckpointSet {
                members: Vec::new(),
            }),
            Probed::CheckpointDir {
                dir, checkpoints, ..
            } => {
                let mut members: Vec<Member> = checkpoints
                    .into_iter()
                    // A TF Serving version: its SavedModel's variables (none: nothing to check).
                    .filter_map(|(name, path)| match serving::version_dir(&path) {
                        Some(_) => Some((name, serving::variables_of(store.as_ref(), &path)?)),
                        None => Some((name, path)),
                    })
                    .map(|(name, prefix)| Member {
                        opened: Ckpt::open_path(&store, &prefix, &cache),
                        name: format!("{name}/"),
                    })
                    .collect();
                // What the state file lists but is not there (or the index files that are
                // gone): failed members, so that verify never passes an incomplete directory.
                for (name, reason) in crate::probe::state::problems(store.as_ref(), &dir) {
                    members.push(Member {
                        name: format!("{name}/"),
                        opened: Err(reason),
                    });
                }
                if members.is_empty() {
                    return Err(SourceProblem::NoCheckpoint(empty_dir(store.as_ref(), &dir)));
                }
                Ok(CheckpointSet { members })
            }
            Probed::Graph { path, .. } => Err(SourceProblem::NoCheckpoint(format!(
                "{}: a graph file, which holds no checkpoint",
                path.display()
            ))),
        }
    }
}

/// The one checkpoint a SOURCE stands for in a comparison: a checkpoint (any format; for V2 the
/// prefix or the path of one of its files, for V1 a file, any one of its shards, the `?????`
/// pattern), a SavedModel's variables, or a checkpoint directory's `latest` (its only checkpoint
/// if it has no state file).
pub(crate) fn one_checkpoint(source: &Path) -> Result<Ckpt, String> {
    let src = open_source(source)?;
    let (store, probed) = (src.store, src.probed);
    let cache = Caches::new(CACHE_BYTES);
    match probed {
        Probed::Checkpoint(found) => {
            Ckpt::opened(&store, found.format.open(&ctx(&store, &cache), &found))
        }
        Probed::SavedModel {
            dir,
            variables: Some(p),
        } => Ckpt::saved_model(&store, &dir, &p, &cache),
        Probed::SavedModel { dir, .. } => {
            Err(format!("{}: a SavedModel without variables", dir.display()))
        }
        Probed::CheckpointDir {
            dir,
            checkpoints,
            latest,
        } => {
            let pick = match &latest {
                Some(l) => checkpoints.iter().find(|(n, _)| n == l),
                None if checkpoints.len() == 1 => checkpoints.first(),
                None => None,
            };
            match pick {
                Some((n, p)) => match serving::version_dir(p) {
                    Some(v) => match serving::variables_of(store.as_ref(), p) {
                        Some(prefix) => Ckpt::open_path(&store, &prefix, &cache),
                        None => Err(format!(
                            "{}: {}; its latest, {n}, is a SavedModel without variables ({})",
                            dir.display(),
                            serving::describe(&checkpoints),
                            v.display()
                        )),
                    },
                    None => Ckpt::open_path(&store, p, &cache),
                },
                None if checkpoints.is_empty() => Err(empty_dir(store.as_ref(), &dir)),
                None => {
                    let names: Vec<&str> = checkpoints.iter().map(|(n, _)| n.as_str()).collect();
                    Err(format!(
                        "{}: no latest checkpoint; name one of: {}",
                        dir.display(),
                        names.join(", ")
                    ))
                }
            }
        }
        Probed::Graph { path, .. } => Err(format!(
            "{}: a graph file, which holds no checkpoint",
            path.display()
        )),
    }
}

/// A SavedModel's directory and the store it is read from.
pub(crate) type SavedModelAt = (Arc<dyn Store>, PathBuf);

/// The SavedModel SOURCE stands for, if it stands for one, and the store to read it from: a
/// SavedModel directory, or a TF Serving base directory's latest version.
pub(crate) fn saved_model_of(source: &Path) -> Result<Option<SavedModelAt>, String> {
    let src = open_source(source)?;
    let dir = match src.probed {
        Probed::SavedModel { dir, .. } => Some(dir),
        Probed::CheckpointDir {
            checkpoints,
            latest: Some(l),
            ..
        } => checkpoints
            .iter()
            .find(|(n, _)| *n == l)
            .and_then(|(_, p)| serving::version_dir(p))
            .map(Path::to_path_buf),
        _ => None,
    };
    Ok(dir.map(|d| (src.store, d)))
}

/// What to say of a checkpoint directory without checkpoints (a TF Serving base directory:
/// which versions it holds, or that none is complete yet).
fn empty_dir(store: &dyn Store, dir: &Path) -> String {
    match serving::describe_dir(store, dir) {
        Some(words) => format!("{}: {words}", dir.display()),
        None => format!("{}: holds no checkpoint yet", dir.display()),
    }
}

/// Calls `read` with a callback that hands the bytes it is given to `f` (the first time);
/// returns what `f` returned (`None` if it was never called) and the count `read` returned.
fn hand_once<R>(
    f: impl FnOnce(&[u8]) -> R,
    read: impl FnOnce(&mut dyn FnMut(&[u8])) -> Result<usize, String>,
) -> Result<(Option<R>, usize), String> {
    let mut f = Some(f);
    let mut out = None;
    let n = read(&mut |b| {
        if let Some(f) = f.take() {
            out = Some(f(b));
        }
    })?;
    Ok((out, n))
}

/// The object-storage options of this process's subcommands, when not the environment's
/// defaults (`tfmount warm -o ...`).
static REMOTE: std::sync::OnceLock<crate::source::remote::RemoteConfig> =
    std::sync::OnceLock::new();

/// Sets the object-storage options every later SOURCE of this process is opened with (once).
pub(crate) fn use_remote_config(cfg: crate::source::remote::RemoteConfig) {
    let _ = REMOTE.set(cfg);
}

/// SOURCE opened as the mount opens it: a local path or an object-store URL.
fn open_source(source: &Path) -> Result<probe::Source, String> {
    let cfg = REMOTE
        .get()
        .cloned()
        .unwrap_or_else(crate::source::remote::RemoteConfig::from_env);
    probe::open(source, &cfg).map_err(|e| e.to_string())
}

/// How the subcommands open checkpoints: stored checksums are checked by the checks
/// themselves (or by the format's checking reads), not on every read.
fn ctx<'a>(store: &'a Arc<dyn Store>, cache: &Arc<Caches>) -> OpenCtx<'a> {
    OpenCtx {
        store: &**store,
        shared: Some(store.clone()),
        caches: cache.clone(),
        verify: false,
        crc_first: false,
    }
}

/// One opened checkpoint, for `verify` and `diff`: the format's checks ([`Integrity`]), with
/// every byte of tensor data read through it counted ([`Ckpt::data_bytes_read`]).
pub struct Ckpt {
    prefix: PathBuf,
    checks: Box<dyn Integrity>,
    data_read: AtomicU64,
    /// `names/` (`(name, key)` pairs), made when first asked for ([`Ckpt::names`]); `None` for
    /// a checkpoint without them.
    names: Option<LazyNames>,
    /// A quantized model's dequantized tensors (TFLite's `dequantized/`: each quantized constant
    /// as float32, under its key), checked and read as a checkpoint of their own.
    dequantized: Option<Box<Ckpt>>,
    /// What `verify` says of a format that stores no checksum ([`Opened::no_checksum`]).
    pub(crate) no_checksum: Option<&'static str>,
    /// Its tensors as the tree shows them (`tfmount edits` replays edits over them).
    tensors: Option<Arc<dyn crate::formats::tensors::TensorSet>>,
}

impl Ckpt {
    /// The checkpoint at `path` of the local filesystem, in whatever format it is.
    pub fn open(path: &Path) -> Result<Ckpt, String> {
        let store: Arc<dyn Store> = Arc::new(LocalStore);
        Ckpt::open_path(&store, path, &Caches::new(CACHE_BYTES))
    }

    fn open_path(store: &Arc<dyn Store>, path: &Path, cache: &Arc<Caches>) -> Result<Ckpt, String> {
        Ckpt::opened(store, formats::open_path(&ctx(store, cache), path))
    }

    fn opened(
        store: &Arc<dyn Store>,
        opened: Result<Arc<dyn Opened>, crate::error::SourceError>,
    ) -> Result<Ckpt, String> {
        let opened = opened.map_err(|e| e.to_string())?;
        let no_checksum = opened.no_checksum();
        let checks = opened.integrity(store.clone());
        let prefix = checks.path().to_path_buf();
        let dequantized = opened
            .tensor_dirs()
            .into_iter()
            .find(|(dir, _)| dir == "dequantized")
            .map(|(_, set)| {
                Box::new(Ckpt {
                    prefix: prefix.clone(),
                    checks: Box::new(Generic::new(set, Vec::new())),
                    data_read: AtomicU64::new(0),
                    names: None,
                    dequantized: None,
                    no_checksum,
                    tensors: None,
                })
            });
        let names = opened.has_names().then(|| {
            let o = opened.clone();
            LazyNames::new(move || Names::from(o.names()))
        });
        Ok(Ckpt {
            prefix,
            checks,
            data_read: AtomicU64::new(0),
            names,
            dequantized,
            no_checksum,
            tensors: Some(opened.tensors()),
        })
    }

    /// Its tensors as the tree shows them (`None` for a derived checkpoint, `dequantized/`).
    pub(crate) fn tensors(&self) -> Option<&Arc<dyn crate::formats::tensors::TensorSet>> {
        self.tensors.as_ref()
    }

    /// A SavedModel's variables (the V2 checkpoint at `prefix`), named as its `names/` names
    /// them: by the object graph of the SavedModel in `dir` and the checkpoint's.
    fn saved_model(
        store: &Arc<dyn Store>,
        dir: &Path,
        prefix: &Path,
        cache: &Arc<Caches>,
    ) -> Result<Ckpt, String> {
        let opened = formats::open_path(&ctx(store, cache), prefix).map_err(|e| e.to_string())?;
        let mut ck = Ckpt::opened(store, Ok(opened.clone()))?;
        if ck.names.is_some() {
            let (store, dir) = (store.clone(), dir.to_path_buf());
            ck.names = Some(LazyNames::new(move || {
                crate::fs::build::saved_model_names_in(&*store, &dir, &*opened)
            }));
        }
        Ok(ck)
    }

    /// The `(name, key)` pairs of its `names/` (made now, the first time), or `None` when it
    /// has no `names/`.
    pub(crate) fn names(&self) -> Option<&[(String, String)]> {
        self.names.as_ref().map(LazyNames::get)
    }

    /// Its dequantized tensors, where it is a quantized model that has them (TFLite).
    pub(crate) fn dequantized(&self) -> Option<&Ckpt> {
        self.dequantized.as_deref()
    }

    pub(crate) fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Bytes of tensor data read so far through this checkpoint.
    pub(crate) fn data_bytes_read(&self) -> u64 {
        self.data_read.load(Ordering::Relaxed)
            + self.dequantized.as_ref().map_or(0, |d| d.data_bytes_read())
    }

    fn count(&self, n: u64) {
        self.data_read.fetch_add(n, Ordering::Relaxed);
    }

    /// The tensors of the checkpoint in key order, with the entries, index blocks and files
    /// that cannot be read.
    pub(crate) fn walk(&self) -> Walk<'_> {
        self.checks.walk()
    }

    /// Where a whole tensor's served bytes lie as they are in a local file (see
    /// [`Integrity::stored_in_local_file`]).
    pub(crate) fn stored_in_local_file(&self, t: &TensorInfo) -> Option<(PathBuf, u64)> {
        self.checks.stored_in_local_file(t)
    }

    /// The stored pieces of a tensor: itself, or its slices.
    pub(crate) fn pieces(&self, t: &TensorInfo) -> Result<Vec<Piece>, String> {
        self.checks.pieces(t)
    }

    /// Checks that a piece's file is there and holds the piece's bytes; the error names the
    /// file.
    pub(crate) fn piece_present(&self, p: &Piece) -> Result<(), String> {
        self.checks.piece_present(p)
    }

    /// Hands stored bytes `[offset, offset + len)` of a piece (not `checked_by_core`) to `f`.
    pub(crate) fn read_piece<R>(
        &self,
        p: &Piece,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        let (out, n) = hand_once(f, |g| self.checks.read_piece(p, offset, len, g))?;
        self.count(n as u64);
        out.ok_or_else(|| format!("{}: nothing read", p.file.display()))
    }

    /// Reads a `checked_by_core` piece whole, checking it.
    pub(crate) fn check_piece(&self, p: &Piece) -> Result<(), String> {
        let n = self.checks.check_piece(p)?;
        self.count(n);
        Ok(())
    }

    /// Checks of whole files beyond the tensors: `(what, bytes read or the problem)`.
    pub(crate) fn file_checks(&self) -> Vec<(Vec<u8>, Result<u64, String>)> {
        let r = self.checks.file_checks();
        for (_, n) in &r {
            if let Ok(n) = n {
                self.count(*n);
            }
        }
        r
    }

    /// Size of the tensor's served bytes (its `.bin` file).
    pub(crate) fn served_size(&self, t: &TensorInfo) -> Result<u64, String> {
        self.checks.served_size(t)
    }

    /// Bytes `[offset, offset + len)` of the tensor's served bytes (its `.bin` file, partitioned
    /// tensors reassembled).
    pub(crate) fn read_served(
        &self,
        t: &TensorInfo,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>, String> {
        let b = self.checks.read_served(t, offset, len)?;
        self.count(b.len() as u64);
        Ok(b)
    }

    /// Hands bytes `[offset, offset + len)` of the tensor's served bytes (fewer at the end of
    /// them) to `f`: inside [`mapped_scope`], a slice of a read-only mapping of the file where
    /// the format reads them as stored (no copy), else read into memory.
    pub(crate) fn read_served_with<R>(
        &self,
        t: &TensorInfo,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        let (out, n) = hand_once(f, |g| self.checks.read_served_with(t, offset, len, g))?;
        self.count(n as u64);
        out.ok_or_else(|| format!("{}: nothing read", self.prefix.display()))
    }

    /// [`Ckpt::read_served`] into `buf` (bytes `[offset, offset + buf.len())`, fewer at the
    /// end of the served bytes); returns how many.
    pub(crate) fn read_served_into(
        &self,
        t: &TensorInfo,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, String> {
        let n = self.checks.read_served_into(t, offset, buf)?;
        self.count(n as u64);
        Ok(n)
    }
}

/// Whether reads may hand out bytes of read-only mappings ([`mapped_scope`]): the guard that
/// absorbs the SIGBUS of a file cut short under its mapping ([`crate::source::mapped`]) is
/// installed, by the first call (once per process; `false` if it cannot be).
pub(crate) fn mapped_reads() -> bool {
    static GUARD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *GUARD.get_or_init(|| crate::source::mapped::install_guard().is_ok())
}

/// Runs `f` with this thread's reads of local files answered from read-only mappings (when
/// [`mapped_reads`]); returns what `f` returned and whether a mapped page it touched was lost
/// (its file cut short: the guard read zeros for it), in which case what `f` made of the bytes
/// is not to be used. Everything that touches the mapped bytes must do so inside `f`.
pub(crate) fn mapped_scope<R>(f: impl FnOnce() -> R) -> (R, bool) {
    crate::source::mapped::scope(f)
}
