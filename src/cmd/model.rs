//! The one adapter between the subcommands and the rest of the crate. Everything `ls`, `cat`,
//! `verify` and `diff` know about sources, the filesystem core and checkpoints goes through the
//! small types here:
//!
//! - [`Tree`]: the tree a mount would show (`ls`, `cat`), over [`crate::fs::Fs`] with no kernel;
//! - [`CheckpointSet`] and [`Ckpt`]: the checkpoints of a SOURCE, walked key by key in index order
//!   ([`Ckpt::walk`] yields [`Item`]s), with each tensor as a [`TensorInfo`], its stored pieces as
//!   [`Piece`]s (one per slice for a partitioned tensor), and the reads `verify` and `diff` need.
//!   Every byte read from a data shard through a `Ckpt` is counted ([`Ckpt::data_bytes_read`]).
//!
//! V2 bundles are read through their index (stored CRC-32Cs, data shards); V1 checkpoints
//! through the core's tensor set ([`v1`]).
//!
//! When the core is restructured, only this file (and [`v1`]) needs to follow.

mod v1;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::FsError;
use crate::format::bundle::{self, Data};
use crate::format::dtype::{DT_STRING, DT_VARIANT};
use crate::format::slice_key::{self, Extent};
use crate::format::table::{self as sstable, Block, Pos};
use crate::fs::{Fs, Kind, Options, ROOT};
use crate::source::bytes::{LocalStore, Store};
use crate::source::checkpoint::Caches;
use crate::source::checkpoint::{data_file_name, index_file_name, Checkpoint, Tensor};
use crate::source::{self, Probed};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Dir,
    File,
    Symlink,
}

/// A file, directory or symbolic link of a [`Tree`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    id: u64,
    pub kind: NodeKind,
}

/// One entry of a directory listing.
#[derive(Debug, Clone)]
pub struct Listed {
    pub name: Vec<u8>,
    pub node: Node,
}

/// Why a path or a file of a [`Tree`] cannot be used.
#[derive(Debug)]
pub enum TreeError {
    NotFound,
    NotDir,
    IsDir,
    /// Too many symbolic links, or one that leaves the tree.
    BadLink(&'static str),
    /// What a mount answers with EIO: the message names the tensor and the source file.
    Damaged(String),
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
        let opts = Options {
            cache_bytes: CACHE_BYTES,
            live: false,
            ..Options::default()
        };
        let fs = Fs::with_store(src.store, &src.probed, &opts).map_err(|e| e.to_string())?;
        Ok(Tree { fs })
    }

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
    pub fn size(&self, n: Node) -> Result<u64, TreeError> {
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
    pub fn read(&self, n: Node, offset: u64, len: usize) -> Result<Vec<u8>, TreeError> {
        let b = self.fs.read(n.id, offset, len)?;
        Ok(b.to_vec())
    }

    pub fn readlink(&self, n: Node) -> Result<Vec<u8>, TreeError> {
        Ok(self.fs.readlink(n.id)?)
    }
}

// ---------------------------------------------------------------------------------------------
// Checkpoints (verify, diff)
// ---------------------------------------------------------------------------------------------

/// The checkpoints of a SOURCE: `(name, prefix, opened checkpoint)`. `name` is what keys are
/// shown under: empty for a single checkpoint, `DIR_NAME/` in a checkpoint directory.
pub struct CheckpointSet {
    pub members: Vec<Member>,
}

pub struct Member {
    pub name: String,
    /// The checkpoint's path: a V2 prefix, or a V1 file, shard or `?????` pattern.
    pub prefix: PathBuf,
    pub opened: Result<Ckpt, String>,
}

/// Why a SOURCE cannot be used as checkpoints.
#[derive(Debug)]
pub enum SourceProblem {
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
    /// Every checkpoint of SOURCE: a prefix, a V1 checkpoint, the variables of a SavedModel (none
    /// if it has no variables), or every checkpoint (V2 or V1) of a checkpoint directory. A
    /// single checkpoint that cannot be opened makes the source unusable; in a directory it is a
    /// failed member.
    pub fn open(source: &Path) -> Result<CheckpointSet, SourceProblem> {
        let src = open_source(source).map_err(SourceProblem::Unusable)?;
        let (store, probed) = (src.store, src.probed);
        let cache = Caches::new(CACHE_BYTES);
        let single =
            |prefix: &Path, opened: Result<Ckpt, String>| -> Result<CheckpointSet, SourceProblem> {
                let ck = opened.map_err(SourceProblem::Unusable)?;
                Ok(CheckpointSet {
                    members: vec![Member {
                        name: String::new(),
                        prefix: prefix.to_path_buf(),
                        opened: Ok(ck),
                    }],
                })
            };
        match probed {
            Probed::Prefix(p) => single(&p, Ckpt::open_with(store.clone(), &p, cache.clone())),
            Probed::SavedModel {
                variables: Some(p), ..
            } => single(&p, Ckpt::open_with(store.clone(), &p, cache.clone())),
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
                    .map(|(name, prefix)| Member {
                        opened: Ckpt::open_member(store.clone(), &prefix, cache.clone()),
                        name: format!("{name}/"),
                        prefix,
                    })
                    .collect();
                // What the state file lists but is not there (or the index files that are
                // gone): failed members, so that verify never passes an incomplete directory.
                for (name, reason) in crate::source::state::problems(store.as_ref(), &dir) {
                    members.push(Member {
                        prefix: dir.join(&name),
                        name: format!("{name}/"),
                        opened: Err(reason),
                    });
                }
                Ok(CheckpointSet { members })
            }
            Probed::Graph { path, .. } => Err(SourceProblem::NoCheckpoint(format!(
                "{}: a graph file, which holds no checkpoint",
                path.display()
            ))),
            Probed::V1 { path, files } => {
                single(&path, Ckpt::open_v1(store.clone(), &path, &files))
            }
        }
    }
}

/// The one checkpoint a SOURCE stands for in a comparison: a prefix (or the path of one of its
/// files), a V1 checkpoint (a file, any one of its shards, the `?????` pattern), a SavedModel's
/// variables, or a checkpoint directory's `latest` (its only checkpoint if it has no state file).
pub fn one_checkpoint(source: &Path) -> Result<Ckpt, String> {
    let src = open_source(source)?;
    let (store, probed) = (src.store, src.probed);
    let cache = Caches::new(CACHE_BYTES);
    let prefix = match probed {
        Probed::Prefix(p) => p,
        Probed::SavedModel {
            variables: Some(p), ..
        } => p,
        Probed::SavedModel { dir, .. } => {
            return Err(format!("{}: a SavedModel without variables", dir.display()))
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
                Some((_, p)) => return Ckpt::open_member(store, p, cache),
                None => {
                    let names: Vec<&str> = checkpoints.iter().map(|(n, _)| n.as_str()).collect();
                    return Err(format!(
                        "{}: no latest checkpoint; name one of: {}",
                        dir.display(),
                        names.join(", ")
                    ));
                }
            }
        }
        Probed::Graph { path, .. } => {
            return Err(format!(
                "{}: a graph file, which holds no checkpoint",
                path.display()
            ))
        }
        Probed::V1 { path, files } => return Ckpt::open_v1(store, &path, &files),
    };
    Ckpt::open_with(store, &prefix, cache)
}

/// SOURCE opened as the mount opens it: a local path or an object-store URL.
fn open_source(source: &Path) -> Result<source::Source, String> {
    source::open(source, &crate::source::remote::RemoteConfig::from_env())
        .map_err(|e| e.to_string())
}

/// One opened checkpoint: a V2 bundle, read through its index (stored CRC-32Cs, data shards), or
/// a V1 checkpoint, read through the core's tensor set ([`v1`]: no stored CRC; the bytes read
/// are checked by the CRC-32C of the table blocks they come from).
pub struct Ckpt {
    prefix: PathBuf,
    /// Where its files live.
    store: Arc<dyn Store>,
    data_read: AtomicU64,
    format: Format,
}

enum Format {
    V2(Box<Bundle>),
    V1(v1::V1Ckpt),
}

/// A V2 bundle.
struct Bundle {
    cache: Arc<Caches>,
    /// Reads bytes as stored, with no CRC check (the callers check them or compare them).
    raw: Checkpoint,
    /// The same checkpoint with the core's CRC checks, for string and variant tensors (whose
    /// stored CRC covers a form other than the stored bytes); opened when first needed.
    checked: OnceLock<Result<Checkpoint, String>>,
    num_shards: u32,
    /// The index block's separator keys (block `b` holds the keys in `(sep[b-1], sep[b]]`).
    separators: OnceLock<Option<Vec<Vec<u8>>>>,
    /// Length of each data file looked at so far (or why it has none), by shard number.
    shard_len: Mutex<HashMap<u32, Result<u64, String>>>,
}

/// What a walk over a checkpoint's keys meets, in key order.
pub enum Item {
    Tensor(TensorInfo),
    /// An index entry that cannot be parsed.
    BadEntry {
        key: Vec<u8>,
        reason: String,
    },
    /// An index data block that cannot be read: its number (from 0), the number of blocks, and
    /// the keys it holds, `(after, up_to]`, when the index block says.
    BadBlock {
        block: u32,
        blocks: u32,
        after: Option<Vec<u8>>,
        up_to: Option<Vec<u8>>,
        reason: String,
    },
    /// A file of a sharded V1 checkpoint that is not there (met first, before any tensor): its
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
pub struct TensorInfo {
    pub key: Vec<u8>,
    /// TensorFlow's dtype name (`float32`, ...; `unknown_N`).
    pub dtype: String,
    pub shape: Vec<u64>,
    /// Stored as slices under their own keys (see [`Ckpt::pieces`]).
    pub partitioned: bool,
    /// Stored bytes (a whole tensor; 0 for a partitioned one). V1 stores values, not bytes: its
    /// fixed-width whole tensors give their served size, its strings 0.
    pub nbytes: u64,
    /// The stored CRC-32C (unmasked) of a whole tensor; `None` when partitioned, and in V1.
    pub crc: Option<u32>,
    handle: Handle,
}

#[derive(Debug, Clone)]
enum Handle {
    V2(Tensor),
    V1(v1::Handle),
}

/// One stored piece of a tensor: the whole tensor, or one slice of a partitioned one. A V1
/// tensor is one piece, its served bytes (partitioned ones assembled).
#[derive(Debug, Clone)]
pub struct Piece {
    /// The slice, per dimension `(start, length)`; empty for a whole tensor.
    pub extent: Vec<(u64, u64)>,
    pub nbytes: u64,
    /// Stored CRC-32C (unmasked); `None` in V1, whose reads are checked by the core.
    pub crc: Option<u32>,
    /// The data file it is stored in (V1: the checkpoint's path).
    pub file: PathBuf,
    /// Whether its bytes are checked by [`Ckpt::check_piece`] (strings, variants, and dtypes
    /// that cannot be read) rather than read with [`Ckpt::read_piece`] and CRC-checked by the
    /// caller.
    pub checked_by_core: bool,
    at: At,
}

/// Where a piece's bytes come from.
#[derive(Debug, Clone)]
enum At {
    V2 {
        shard: u32,
        offset: u64,
        tensor: Tensor,
    },
    V1(v1::Handle),
}

/// A tensor or piece of one checkpoint given to another.
const FOREIGN: &str = "a tensor of another checkpoint";

/// A core error message without the `PREFIX: tensor KEY: ` the caller already shows.
/// A core error as a reason on a line that already names the tensor: the file and what is
/// wrong with it, said once (`CRC-32C mismatch in FILE (stored .., computed ..)`, `FILE: what`).
fn bare(e: FsError, prefix: &Path, key: &[u8]) -> String {
    let e = match e {
        FsError::Corrupt {
            file,
            source: crate::format::FormatError::TensorCrc { stored, computed },
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

fn hidden(key: &[u8]) -> bool {
    key.first().is_none_or(|&b| b == 0)
}

impl Ckpt {
    pub fn open(prefix: &Path) -> Result<Ckpt, String> {
        Ckpt::open_with(Arc::new(LocalStore), prefix, Caches::new(CACHE_BYTES))
    }

    /// A checkpoint directory's member: a V1 checkpoint when its path is one (by content), else
    /// a V2 prefix.
    fn open_member(
        store: Arc<dyn Store>,
        prefix: &Path,
        cache: Arc<Caches>,
    ) -> Result<Ckpt, String> {
        match source::checkpoint_at(&*store, prefix) {
            Some(Probed::V1 { path, files }) => Ckpt::open_v1(store, &path, &files),
            _ => Ckpt::open_with(store, prefix, cache),
        }
    }

    /// The V1 checkpoint `path` names (a file, a shard, a `?????` pattern), made of `files`.
    fn open_v1(store: Arc<dyn Store>, path: &Path, files: &[PathBuf]) -> Result<Ckpt, String> {
        Ok(Ckpt {
            prefix: path.to_path_buf(),
            format: Format::V1(v1::V1Ckpt::open(&*store, path, files)?),
            store,
            data_read: AtomicU64::new(0),
        })
    }

    fn open_with(store: Arc<dyn Store>, prefix: &Path, cache: Arc<Caches>) -> Result<Ckpt, String> {
        let raw =
            Checkpoint::open(&*store, prefix, cache.clone(), false).map_err(|e| e.to_string())?;
        let index = index_file_name(prefix);
        // The header (the entry under the empty key) was parsed by `open`; its shard count is
        // needed to name data files.
        let num_shards = (|| {
            let p = raw.table().seek(b"").ok()??;
            let (blk, i) = raw.table().entry(p).ok()?;
            bundle::parse_header(blk.value(i)).ok()
        })()
        .map(|h| h.num_shards)
        .ok_or_else(|| format!("{}: cannot read the bundle header", index.display()))?;
        Ok(Ckpt {
            prefix: prefix.to_path_buf(),
            store,
            data_read: AtomicU64::new(0),
            format: Format::V2(Box::new(Bundle {
                cache,
                raw,
                checked: OnceLock::new(),
                num_shards,
                separators: OnceLock::new(),
                shard_len: Mutex::new(HashMap::new()),
            })),
        })
    }

    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Bytes read from data shards so far through this checkpoint (V1: tensor bytes served).
    pub fn data_bytes_read(&self) -> u64 {
        self.data_read.load(Ordering::Relaxed)
    }

    fn count(&self, n: u64) {
        self.data_read.fetch_add(n, Ordering::Relaxed);
    }

    /// The tensors of the checkpoint in key order (the header and slice entries are not
    /// tensors), with the entries and index blocks that cannot be read (V1: first its missing
    /// shards).
    pub fn walk(&self) -> Walk<'_> {
        Walk(match &self.format {
            Format::V2(b) => Walks::V2(BundleWalk {
                ck: self,
                b,
                block: 0,
                entry: 0,
                current: None,
            }),
            Format::V1(s) => Walks::V1(s.walk()),
        })
    }

    /// The stored pieces of a tensor: itself, or its slices (checked to tile the tensor, each
    /// present in the index with the tensor's dtype and the slice's shape). A V1 tensor is one
    /// piece (partitioned ones assembled by the core).
    pub fn pieces(&self, t: &TensorInfo) -> Result<Vec<Piece>, String> {
        match (&self.format, &t.handle) {
            (Format::V2(b), Handle::V2(tensor)) => self.v2_pieces(b, t, tensor),
            (Format::V1(s), Handle::V1(h)) => Ok(vec![s.piece(h)?]),
            _ => Err(FOREIGN.into()),
        }
    }

    /// Checks that a piece's data file is there and holds the piece's bytes; the error names
    /// the file. Each data file is looked at once (`stat`); reading the piece finds any other
    /// trouble. (V1 files were all opened with the checkpoint.)
    pub fn piece_present(&self, p: &Piece) -> Result<(), String> {
        let (b, shard, offset) = match (&self.format, &p.at) {
            (Format::V2(b), At::V2 { shard, offset, .. }) => (b, *shard, *offset),
            (Format::V1(_), At::V1(_)) => return Ok(()),
            _ => return Err(FOREIGN.into()),
        };
        let end = offset.saturating_add(p.nbytes);
        let len = {
            let mut known = b.shard_len.lock().unwrap_or_else(|e| e.into_inner());
            known
                .entry(shard)
                .or_insert_with(|| match self.store.open(&p.file) {
                    Ok(f) => Ok(f.len()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err(format!("data file {} is missing", p.file.display()))
                    }
                    Err(e) => Err(format!("data file {}: {e}", p.file.display())),
                })
                .clone()?
        };
        if len < end {
            return Err(format!(
                "data file {} is truncated: {len} bytes, the tensor is stored at bytes {offset}..{end}",
                p.file.display(),
            ));
        }
        Ok(())
    }

    /// Hands stored bytes `[offset, offset + len)` of a piece (not `checked_by_core`),
    /// unchecked, to `f`. (V1: the served bytes, checked by the core as they are read.)
    pub fn read_piece<R>(
        &self,
        p: &Piece,
        offset: u64,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        let b = match (&self.format, &p.at) {
            (Format::V2(b), At::V2 { tensor, .. }) => b
                .raw
                .read(tensor, offset, len)
                .map_err(|e| bare(e, &self.prefix, &tensor.key))?,
            (Format::V1(s), At::V1(h)) => s.read(h, offset, len)?,
            _ => return Err(FOREIGN.into()),
        };
        self.count(b.len() as u64);
        Ok(f(&b))
    }

    /// Reads a `checked_by_core` piece whole and checks it against its stored CRC-32C (V1:
    /// reads it whole, which checks it).
    pub fn check_piece(&self, p: &Piece) -> Result<(), String> {
        let (b, tensor) = match (&self.format, &p.at) {
            (Format::V2(b), At::V2 { tensor, .. }) => (b, tensor),
            (Format::V1(s), At::V1(h)) => {
                let n = s.read_all(h)?;
                self.count(n);
                return Ok(());
            }
            _ => return Err(FOREIGN.into()),
        };
        let d = tensor.entry.dtype;
        if d != DT_STRING && d != DT_VARIANT {
            return Err(format!("dtype {} cannot be read", d.display_name()));
        }
        let ck = self.checked(b)?;
        let r = if d == DT_STRING {
            ck.served_size(tensor).map(|_| ())
        } else {
            ck.read(tensor, 0, 0).map(|_| ())
        };
        self.count(p.nbytes);
        r.map_err(|e| bare(e, &self.prefix, &tensor.key))
    }

    /// Size of the tensor's served bytes (its `.bin` file).
    pub fn served_size(&self, t: &TensorInfo) -> Result<u64, String> {
        match (&self.format, &t.handle) {
            (Format::V2(b), Handle::V2(tensor)) => b
                .raw
                .served_size(tensor)
                .map_err(|e| bare(e, &self.prefix, &t.key)),
            (Format::V1(s), Handle::V1(h)) => Ok(s.data(h)?.size()),
            _ => Err(FOREIGN.into()),
        }
    }

    /// Bytes `[offset, offset + len)` of the tensor's served bytes (its `.bin` file, partitioned
    /// tensors reassembled), not CRC-checked (V1: checked by the core as they are read).
    pub fn read_served(&self, t: &TensorInfo, offset: u64, len: usize) -> Result<Vec<u8>, String> {
        let b = match (&self.format, &t.handle) {
            (Format::V2(b), Handle::V2(tensor)) => b
                .raw
                .read(tensor, offset, len)
                .map_err(|e| bare(e, &self.prefix, &t.key))?
                .to_vec(),
            (Format::V1(s), Handle::V1(h)) => s.read(h, offset, len)?,
            _ => return Err(FOREIGN.into()),
        };
        self.count(b.len() as u64);
        Ok(b)
    }

    // -- V2 ----------------------------------------------------------------------------------

    fn checked<'b>(&self, b: &'b Bundle) -> Result<&'b Checkpoint, String> {
        b.checked
            .get_or_init(|| {
                Checkpoint::open(&*self.store, &self.prefix, b.cache.clone(), true)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|e| e.clone())
    }

    fn separators<'b>(&self, b: &'b Bundle) -> Option<&'b Vec<Vec<u8>>> {
        b.separators
            .get_or_init(|| {
                let f = self.store.open(&index_file_name(&self.prefix)).ok()?;
                let footer = sstable::read_footer(&*f).ok()?;
                let blk = Block::parse(sstable::read_block_at(&*f, footer.index).ok()?).ok()?;
                Some((0..blk.len()).map(|i| blk.key(i).to_vec()).collect())
            })
            .as_ref()
    }

    fn info(&self, t: Tensor) -> TensorInfo {
        let (partitioned, nbytes, crc) = match t.entry.data {
            Data::Contiguous { size, crc, .. } => {
                (false, size, Some(crate::format::unmask_crc(crc)))
            }
            Data::Sliced(_) => (true, 0, None),
        };
        TensorInfo {
            key: t.key.clone(),
            dtype: t.entry.dtype.display_name(),
            shape: t.entry.shape.clone(),
            partitioned,
            nbytes,
            crc,
            handle: Handle::V2(t),
        }
    }

    fn piece(&self, b: &Bundle, t: Tensor, extent: Vec<(u64, u64)>) -> Result<Piece, String> {
        let Data::Contiguous {
            shard,
            offset,
            size,
            crc,
        } = t.entry.data
        else {
            return Err("a slice entry is itself partitioned".into());
        };
        let d = t.entry.dtype;
        Ok(Piece {
            extent,
            nbytes: size,
            crc: Some(crate::format::unmask_crc(crc)),
            file: data_file_name(&self.prefix, shard, b.num_shards),
            checked_by_core: d == DT_STRING || d == DT_VARIANT || d.elem_size().is_none(),
            at: At::V2 {
                shard,
                offset,
                tensor: t,
            },
        })
    }

    fn v2_pieces(&self, b: &Bundle, t: &TensorInfo, tensor: &Tensor) -> Result<Vec<Piece>, String> {
        let slices = match &tensor.entry.data {
            Data::Contiguous { .. } => {
                return Ok(vec![self.piece(b, tensor.clone(), Vec::new())?])
            }
            Data::Sliced(s) => s,
        };
        let shape = &t.shape;
        bundle::check_tiling(shape, slices).map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(slices.len());
        for s in slices {
            let extent = extent_of(shape, s);
            let what = || format!("slice {}", show_extent(&extent));
            let st = b
                .raw
                .lookup(&slice_key::encode(&t.key, s))
                .map_err(|e| format!("{}: {}", what(), bare(e, &self.prefix, &t.key)))?
                .ok_or_else(|| format!("{}: its entry is missing from the index", what()))?;
            if st.entry.dtype != tensor.entry.dtype
                || st.entry.shape != bundle::slice_shape(shape, s)
            {
                return Err(format!(
                    "{}: its entry does not match the tensor's dtype or the slice's shape",
                    what()
                ));
            }
            out.push(self.piece(b, st, extent)?);
        }
        Ok(out)
    }
}

fn extent_of(shape: &[u64], s: &[Extent]) -> Vec<(u64, u64)> {
    shape
        .iter()
        .zip(s)
        .map(|(&d, e)| {
            if e.length < 0 {
                (0, d)
            } else {
                (e.start as u64, e.length as u64)
            }
        })
        .collect()
}

/// A slice as TensorFlow writes it in `shape_and_slices`: `start,length` per dimension, `:`
/// between dimensions.
pub fn show_extent(e: &[(u64, u64)]) -> String {
    let v: Vec<String> = e.iter().map(|(s, l)| format!("{s},{l}")).collect();
    v.join(":")
}

/// Iterator of [`Ckpt::walk`].
pub struct Walk<'a>(Walks<'a>);

enum Walks<'a> {
    V2(BundleWalk<'a>),
    V1(v1::V1Walk<'a>),
}

impl Iterator for Walk<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        match &mut self.0 {
            Walks::V2(w) => w.next(),
            Walks::V1(w) => w.next(),
        }
    }
}

/// A V2 walk: one index block at a time.
struct BundleWalk<'a> {
    ck: &'a Ckpt,
    b: &'a Bundle,
    block: u32,
    entry: u32,
    current: Option<Arc<Block>>,
}

impl Iterator for BundleWalk<'_> {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        let table = self.b.raw.table();
        let blocks = u32::try_from(table.num_blocks()).unwrap_or(u32::MAX);
        loop {
            if self.block >= blocks {
                return None;
            }
            let blk = match &self.current {
                Some(b) => b.clone(),
                None => match table.block(self.block) {
                    Ok(b) => {
                        self.current = Some(b.clone());
                        self.entry = 0;
                        b
                    }
                    Err(e) => {
                        let b = self.block;
                        self.block += 1;
                        let seps = self.ck.separators(self.b);
                        let sep = |i: usize| seps.and_then(|s| s.get(i).cloned());
                        return Some(Item::BadBlock {
                            block: b,
                            blocks,
                            after: b.checked_sub(1).and_then(|p| sep(p as usize)),
                            up_to: sep(b as usize),
                            reason: e.to_string(),
                        });
                    }
                },
            };
            let i = self.entry as usize;
            let Some(key) = blk.key_checked(i) else {
                self.current = None;
                self.block += 1;
                continue;
            };
            self.entry += 1;
            if hidden(key) {
                continue;
            }
            let pos = Pos {
                block: self.block,
                entry: i as u32,
            };
            return Some(match self.b.raw.tensor_at(pos) {
                Ok(t) => Item::Tensor(self.ck.info(t)),
                Err(e) => Item::BadEntry {
                    key: key.to_vec(),
                    reason: format!("index entry unreadable: {}", bare(e, &self.ck.prefix, key)),
                },
            });
        }
    }
}
