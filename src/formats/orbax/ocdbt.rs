//! OCDBT, tensorstore's Optionally-Cooperative Distributed B+Tree (the key-value store Orbax
//! writes its arrays into), read-only: the manifest, the latest version's B+tree root, and
//! lookups and ordered listings of keys that read only the nodes on their path. Every manifest
//! and node is checked against its CRC-32C before it is decoded; zstd bodies are decompressed
//! into at most [`MAX_NODE`] bytes; every length and count is checked against the bytes that hold
//! it (no allocation is sized by a claimed length).
//!
//! Format: tensorstore's `kvstore/ocdbt/index.rst` ("Storage format"). Encoded manifest, version
//! tree node and B+tree node share an outer header (`uint32be` magic, `uint64le` length of the
//! whole encoding, varint version 0, varint compression 0 none / 1 zstd), a body, and a
//! `uint32le` CRC-32C of everything before it. The manifest's configuration is the one
//! tensorstore 0.1.86 writes: the uuid, then the manifest kind (0: the version tree inline), the
//! inline and node size limits, the version tree arity, the compression.

use crate::sync::lock;
use std::sync::Arc;

use crate::parse::varint;
use crate::parse::FormatError;

const MANIFEST_MAGIC: u32 = 0x0cdb_3a2a;
const BTREE_MAGIC: u32 = 0x0cdb_20de;
/// Largest decoded manifest or node accepted (tensorstore's default `max_decoded_node_bytes`
/// is 8 MiB).
pub(crate) const MAX_NODE: usize = 64 << 20;
/// Deepest B+tree (or version tree) followed: a loop of nodes ends here.
const MAX_HEIGHT: u8 = 32;

fn bad(m: impl Into<String>) -> FormatError {
    FormatError::Format(format!("OCDBT: {}", m.into()))
}

/// Where an encoded node lies: a data file (its path relative to the database root) and the
/// byte range in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeRef {
    pub(crate) path: Vec<u8>,
    pub(crate) offset: u64,
    pub(crate) length: u64,
    /// The transitive path the node's own data file table resolves against (the referring
    /// table's transitive path and this file's base path).
    pub(crate) base: Vec<u8>,
}

/// Where a value lies: in the node that listed it, or in a data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Inline(Vec<u8>),
    Indirect(NodeRef),
}

/// One key of a leaf node, its full key and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) key: Vec<u8>,
    pub(crate) value: Value,
}

/// A child of an interior B+tree node: the full key its subtree starts at, the prefix every key
/// below it shares, and where it is.
#[derive(Debug, Clone)]
pub(crate) struct Child {
    pub(crate) start: Vec<u8>,
    pub(crate) prefix: Vec<u8>,
    pub(crate) node: NodeRef,
}

/// A decoded B+tree node.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    Leaf(Vec<Entry>),
    Interior { height: u8, children: Vec<Child> },
}

/// The manifest: where the latest version's B+tree root is (`None`: an empty database).
#[derive(Debug, Clone)]
pub(crate) struct Manifest {
    pub(crate) root: Option<(NodeRef, u8)>,
}

/// A cursor over a decoded body.
struct Cur<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cur<'a> {
    fn new(b: &'a [u8]) -> Self {
        Cur { b, at: 0 }
    }
    fn varint(&mut self) -> Result<u64, FormatError> {
        let (v, n) = varint::decode_u64(self.b.get(self.at..).unwrap_or(&[]))
            .ok_or(FormatError::BadVarint)?;
        self.at += n;
        Ok(v)
    }
    /// A varint that counts or sizes things in the rest of the body: at most `remaining`.
    fn count(&mut self, what: &str) -> Result<usize, FormatError> {
        let v = self.varint()?;
        usize::try_from(v)
            .ok()
            .filter(|&n| n <= self.b.len().saturating_sub(self.at).saturating_add(1) << 3)
            .ok_or_else(|| bad(format!("{what} {v} does not fit in the node")))
    }
    /// `n` counts (a column of a node's entries).
    fn counts(&mut self, n: usize, what: &str) -> Result<Vec<usize>, FormatError> {
        (0..n).map(|_| self.count(what)).collect()
    }

    /// Prefix-compressed byte strings: each shares `prefix[i - 1]` bytes with the one before it
    /// and adds `suffix[i]` bytes, read here, in order.
    fn unprefix(
        &mut self,
        prefix: &[usize],
        suffix: &[usize],
        what: &str,
    ) -> Result<Vec<Vec<u8>>, FormatError> {
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(suffix.len());
        for (i, &add) in suffix.iter().enumerate() {
            let keep = if i == 0 { 0 } else { prefix[i - 1] };
            let prev = out.last().map_or(&[][..], Vec::as_slice);
            let head = prev
                .get(..keep)
                .ok_or_else(|| bad(format!("{what} shares more bytes than the one before it")))?;
            let s = [head, self.bytes(add)?].concat();
            out.push(s);
        }
        Ok(out)
    }

    /// `n` varints (a column of a node's entries).
    fn varints(&mut self, n: usize) -> Result<Vec<u64>, FormatError> {
        (0..n).map(|_| self.varint()).collect()
    }
    fn u8(&mut self) -> Result<u8, FormatError> {
        let v = *self.b.get(self.at).ok_or_else(|| bad("node ends early"))?;
        self.at += 1;
        Ok(v)
    }
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| bad("node ends early"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u64le(&mut self) -> Result<u64, FormatError> {
        let b = self.bytes(8)?;
        Ok(u64::from_le_bytes(b.try_into().map_err(|_| bad("short"))?))
    }
}

/// Checks an encoding's outer header and CRC-32C and returns its decoded body.
fn decode(enc: &[u8], magic: u32, what: &str) -> Result<Vec<u8>, FormatError> {
    if enc.len() < 12 + 2 + 4 {
        return Err(bad(format!("{what} of {} bytes is too short", enc.len())));
    }
    let m = u32::from_be_bytes([enc[0], enc[1], enc[2], enc[3]]);
    if m != magic {
        return Err(bad(format!(
            "{what}: magic {m:#010x}, expected {magic:#010x}"
        )));
    }
    let mut c = Cur::new(enc);
    c.at = 4;
    let length = c.u64le()?;
    if length != enc.len() as u64 {
        return Err(bad(format!(
            "{what} says it is {length} bytes long, {} were read",
            enc.len()
        )));
    }
    let (body_end, stored) = enc.split_at(enc.len() - 4);
    let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
    let computed = crc32c::crc32c(body_end);
    if stored != computed {
        return Err(bad(format!(
            "{what} checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        )));
    }
    let version = c.varint()?;
    if version != 0 {
        return Err(bad(format!(
            "{what} version {version} (this reader knows 0)"
        )));
    }
    let compression = c.varint()?;
    let body = &body_end[c.at.min(body_end.len())..];
    match compression {
        0 => Ok(body.to_vec()),
        1 => zstd_bounded(body).map_err(|e| bad(format!("{what}: zstd: {e}"))),
        n => Err(bad(format!("{what}: unknown compression {n}"))),
    }
}

/// A zstd frame decompressed into at most [`MAX_NODE`] bytes.
fn zstd_bounded(b: &[u8]) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let mut d = zstd::stream::read::Decoder::new(b).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    (&mut d)
        .take(MAX_NODE as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.to_string())?;
    if out.len() > MAX_NODE {
        return Err(format!("decodes to more than {MAX_NODE} bytes"));
    }
    Ok(out)
}

/// A data file of a table: its full path, and the transitive path the nodes read from it resolve
/// their own tables against (`transitive + base_path`).
type DataFile = (Vec<u8>, Vec<u8>);

/// A data file table.
fn data_files(c: &mut Cur, transitive: &[u8]) -> Result<Vec<DataFile>, FormatError> {
    let n = c.count("data file count")?;
    let prefix = c.counts(n.saturating_sub(1), "path prefix length")?;
    let suffix = c.counts(n, "path suffix length")?;
    let base = c.counts(n, "base path length")?;
    let paths = c.unprefix(&prefix, &suffix, "data file path")?;
    paths
        .into_iter()
        .zip(base)
        .map(|(path, base)| {
            if path.len() > 65535 || base > path.len() {
                return Err(bad("data file path too long, or its base longer than it"));
            }
            Ok((
                [transitive, &path].concat(),
                [transitive, &path[..base]].concat(),
            ))
        })
        .collect()
}

fn file_at(files: &[DataFile], id: u64) -> Result<&DataFile, FormatError> {
    usize::try_from(id)
        .ok()
        .and_then(|i| files.get(i))
        .ok_or_else(|| bad(format!("data file {id} is not in the node's table")))
}

impl Manifest {
    /// Decodes `manifest.ocdbt`.
    pub(crate) fn parse(enc: &[u8]) -> Result<Manifest, FormatError> {
        let body = decode(enc, MANIFEST_MAGIC, "manifest")?;
        let mut c = Cur::new(&body);
        c.bytes(16)?; // uuid
        match c.varint()? {
            0 => {} // the version tree is in this manifest
            1 => {
                return Err(bad(
                    "numbered manifests (manifest.<generation> files) are not read yet",
                ))
            }
            n => return Err(bad(format!("unknown manifest kind {n}"))),
        }
        c.varint()?; // max_inline_value_bytes
        c.varint()?; // max_decoded_node_bytes
        let arity_log2 = c.u8()?;
        if arity_log2 == 0 || arity_log2 > 16 {
            return Err(bad(format!("version tree arity 2^{arity_log2}")));
        }
        match c.varint()? {
            0 => {}
            1 => {
                c.bytes(4)?; // zstd level
            }
            n => return Err(bad(format!("unknown compression method {n}"))),
        }
        let files = data_files(&mut c, b"")?;
        // The inline versions (version tree leaf entries): the newest is last.
        let n = c.count("version count")?;
        c.varints(n)?; // generation numbers
        let height = c.bytes(n)?.to_vec();
        let ids = c.varints(n)?;
        let offsets = c.varints(n)?;
        let lengths = c.varints(n)?;
        let Some(last) = n.checked_sub(1) else {
            return Ok(Manifest { root: None });
        };
        let (path, base) = file_at(&files, ids[last])?;
        let root = (lengths[last] > 0).then(|| {
            (
                NodeRef {
                    path: path.clone(),
                    offset: offsets[last],
                    length: lengths[last],
                    base: base.clone(),
                },
                height[last],
            )
        });
        Ok(Manifest { root })
    }
}

impl Node {
    /// Decodes a B+tree node whose keys all start with `prefix` (the path's implicit prefix);
    /// child references resolve against `transitive`, the path the node was read by less its
    /// file's relative part (see the data file table).
    pub(crate) fn parse(enc: &[u8], prefix: &[u8], transitive: &[u8]) -> Result<Node, FormatError> {
        let body = decode(enc, BTREE_MAGIC, "B+tree node")?;
        let mut c = Cur::new(&body);
        let height = c.u8()?;
        if height > MAX_HEIGHT {
            return Err(bad(format!("B+tree node of height {height}")));
        }
        let files = data_files(&mut c, transitive)?;
        let n = c.count("entry count")?;
        let keys = relative_keys(&mut c, n, height > 0)?;
        if height == 0 {
            // Value lengths: an indirect value's is in its data file, so only inline ones are
            // bounded by the node (when their bytes are read).
            let lens = c.varints(n)?;
            let kinds = c.varints(n)?;
            let indirect = kinds.iter().filter(|&&k| k == 1).count();
            if kinds.iter().any(|&k| k > 1) {
                return Err(bad("unknown value kind"));
            }
            let ids = c.varints(indirect)?;
            let offs = c.varints(indirect)?;
            let mut out = Vec::with_capacity(n);
            let mut k = 0usize;
            for (i, (rel, _)) in keys.into_iter().enumerate() {
                let value = if kinds[i] == 1 {
                    let (path, base) = file_at(&files, ids[k])?;
                    let v = NodeRef {
                        path: path.clone(),
                        offset: offs[k],
                        length: lens[i],
                        base: base.clone(),
                    };
                    k += 1;
                    Value::Indirect(v)
                } else {
                    let len = usize::try_from(lens[i])
                        .map_err(|_| bad(format!("inline value length {}", lens[i])))?;
                    Value::Inline(c.bytes(len)?.to_vec())
                };
                out.push(Entry {
                    key: [prefix, &rel].concat(),
                    value,
                });
            }
            Ok(Node::Leaf(out))
        } else {
            let refs = c.varints(n)?;
            let offs = c.varints(n)?;
            let lens = c.varints(n)?;
            // num_keys, num_tree_bytes, num_indirect_value_bytes: statistics, not needed.
            for _ in 0..3 * n {
                c.varint()?;
            }
            let mut children = Vec::with_capacity(n);
            for (i, (rel, common)) in keys.into_iter().enumerate() {
                let (path, base) = file_at(&files, refs[i])?;
                children.push(Child {
                    prefix: [prefix, &rel[..common]].concat(),
                    start: [prefix, &rel].concat(),
                    node: NodeRef {
                        path: path.clone(),
                        offset: offs[i],
                        length: lens[i],
                        base: base.clone(),
                    },
                });
            }
            Ok(Node::Interior { height, children })
        }
    }
}

/// The relative keys of a node's `n` entries (prefix-compressed), with (interior nodes) each
/// one's subtree common prefix length.
fn relative_keys(
    c: &mut Cur,
    n: usize,
    interior: bool,
) -> Result<Vec<(Vec<u8>, usize)>, FormatError> {
    let prefix = c.counts(n.saturating_sub(1), "key prefix length")?;
    let suffix = c.counts(n, "key suffix length")?;
    let common = c.counts(if interior { n } else { 0 }, "subtree prefix length")?;
    let keys = c.unprefix(&prefix, &suffix, "key")?;
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| {
            let cp = common.get(i).copied().unwrap_or(0);
            if cp > k.len() {
                return Err(bad("subtree prefix longer than its key"));
            }
            Ok((k, cp))
        })
        .collect()
}

/// Reads `[offset, offset + length)` of a data file (its path relative to the database root).
pub(crate) trait Files {
    fn read(&self, path: &[u8], offset: u64, length: u64) -> Result<Vec<u8>, FormatError>;
}

/// Decoded nodes a database keeps (the root and the interior nodes every lookup passes through,
/// and the leaves read last): a listing of one directory's tensors then costs one read of each
/// node on its path, not one per tensor.
const NODE_CACHE: usize = 64;
/// Nodes larger than this (encoded) are decoded for each use, not kept.
const MAX_CACHED_NODE: u64 = 1 << 20;

type NodeKey = (Vec<u8>, u64, Vec<u8>);

/// A database: its manifest, its files, the nodes read last.
pub(crate) struct Db<F: Files> {
    files: F,
    manifest: Manifest,
    nodes: std::sync::Mutex<lru::LruCache<NodeKey, Arc<Node>>>,
}

impl<F: Files> Db<F> {
    pub(crate) fn open(files: F) -> Result<Self, FormatError> {
        let enc = files.read(b"manifest.ocdbt", 0, u64::MAX)?;
        let manifest = Manifest::parse(&enc)?;
        Ok(Db {
            files,
            manifest,
            nodes: std::sync::Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(NODE_CACHE).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
        })
    }

    fn node(&self, r: &NodeRef, prefix: &[u8]) -> Result<Arc<Node>, FormatError> {
        if r.length > MAX_NODE as u64 {
            return Err(bad(format!("a node of {} bytes", r.length)));
        }
        let key = (r.path.clone(), r.offset, prefix.to_vec());
        let lock = || lock(&self.nodes);
        if let Some(n) = lock().get(&key) {
            return Ok(n.clone());
        }
        let enc = self.files.read(&r.path, r.offset, r.length)?;
        let node = Arc::new(Node::parse(&enc, prefix, &r.base)?);
        if r.length <= MAX_CACHED_NODE {
            lock().put(key, node.clone());
        }
        Ok(node)
    }

    /// The bytes of a value (read from its data file when it is not inline).
    pub(crate) fn value_bytes(&self, v: &Value) -> Result<Vec<u8>, FormatError> {
        match v {
            Value::Inline(b) => Ok(b.clone()),
            Value::Indirect(r) => self.files.read(&r.path, r.offset, r.length),
        }
    }

    /// Node `r` at `height` (as its parent or the manifest says): a node of another height is
    /// damage (and a loop of nodes cannot go on, heights only fall).
    fn node_at(&self, r: &NodeRef, prefix: &[u8], height: u8) -> Result<Arc<Node>, FormatError> {
        let n = self.node(r, prefix)?;
        let found = match &*n {
            Node::Leaf(_) => 0,
            Node::Interior { height, .. } => *height,
        };
        if found != height {
            return Err(bad(format!(
                "a B+tree node of height {found} where its parent says {height}"
            )));
        }
        Ok(n)
    }

    /// The value of `key`, if present; reads the nodes on its path only.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Value>, FormatError> {
        let Some((root, height)) = &self.manifest.root else {
            return Ok(None);
        };
        let mut r = root.clone();
        let mut prefix = Vec::new();
        let mut height = *height;
        loop {
            match &*self.node_at(&r, &prefix, height)? {
                Node::Leaf(entries) => {
                    return Ok(entries
                        .iter()
                        .find(|e| e.key == key)
                        .map(|e| e.value.clone()))
                }
                Node::Interior { children, .. } => {
                    let i = children.partition_point(|c| c.start.as_slice() <= key);
                    let Some(c) = i.checked_sub(1).and_then(|i| children.get(i)) else {
                        return Ok(None);
                    };
                    if !key.starts_with(&c.prefix) {
                        return Ok(None);
                    }
                    prefix = c.prefix.clone();
                    r = c.node.clone();
                    height -= 1;
                }
            }
        }
    }

    /// Every key starting with `start`, in order, with its value: the nodes whose range can hold
    /// such keys, only.
    pub(crate) fn list(&self, start: &[u8]) -> Result<Vec<Entry>, FormatError> {
        let mut out = Vec::new();
        if let Some((root, height)) = &self.manifest.root {
            self.list_in(root, &[], start, *height, &mut out)?;
        }
        Ok(out)
    }

    fn list_in(
        &self,
        r: &NodeRef,
        prefix: &[u8],
        start: &[u8],
        height: u8,
        out: &mut Vec<Entry>,
    ) -> Result<(), FormatError> {
        match &*self.node_at(r, prefix, height)? {
            Node::Leaf(entries) => {
                out.extend(entries.iter().filter(|e| e.key.starts_with(start)).cloned())
            }
            Node::Interior { children, .. } => {
                for (i, c) in children.iter().enumerate() {
                    let next = children.get(i + 1).map(|n| n.start.as_slice());
                    // The child holds keys in [c.start, next), all starting with c.prefix.
                    let may = (c.prefix.starts_with(start) || start.starts_with(&c.prefix))
                        && next.is_none_or(|n| n > start || n.starts_with(start));
                    if may {
                        self.list_in(&c.node, &c.prefix, start, height - 1, out)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expected, fixture, sha};
    use super::*;
    use std::path::PathBuf;

    struct Dir(PathBuf);

    impl Files for Dir {
        fn read(&self, path: &[u8], offset: u64, length: u64) -> Result<Vec<u8>, FormatError> {
            let p = self.0.join(String::from_utf8_lossy(path).as_ref());
            let all = std::fs::read(&p).map_err(|e| bad(format!("{}: {e}", p.display())))?;
            let a = usize::try_from(offset).unwrap_or(usize::MAX).min(all.len());
            let b = if length == u64::MAX {
                all.len()
            } else {
                a.saturating_add(length as usize).min(all.len())
            };
            Ok(all[a..b].to_vec())
        }
    }

    /// The leaves Orbax's restore gave (tests/fixtures/orbax/expected/NAME.json), as the array
    /// names Orbax stores them under (pytree path components joined by `.`).
    fn expected_arrays(name: &str) -> Vec<String> {
        let mut names: Vec<String> = expected(name)
            .into_keys()
            .map(|k| k.replace('/', "."))
            .collect();
        names.sort();
        names
    }

    /// Every array of an OCDBT checkpoint: its metadata key and its chunk keys.
    fn arrays(db: &Db<Dir>) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for e in db.list(b"").expect("list") {
            let k = String::from_utf8(e.key).expect("utf-8 key");
            let (array, rest) = k.split_once('/').expect("array/key");
            out.entry(array.to_string())
                .or_default()
                .push(rest.to_string());
        }
        out
    }

    #[test]
    fn every_array_orbax_wrote_is_there_with_its_chunks() {
        for (dir, name) in [
            ("ocdbt/ckpt", "ocdbt"),
            ("manager/1/default", "manager_1"),
            ("manager/10/default", "manager_10"),
        ] {
            let db = Db::open(Dir(fixture(dir))).expect("open");
            let arrays = arrays(&db);
            assert_eq!(
                arrays.keys().cloned().collect::<Vec<_>>(),
                expected_arrays(name),
                "{dir}"
            );
            for (a, keys) in &arrays {
                assert!(
                    keys.contains(&".zarray".to_string()),
                    "{dir}: {a}: {keys:?}"
                );
            }
            // The one array saved in chunks of at most 8 KiB: 128 x 64 float32, 4 chunks.
            assert_eq!(
                arrays["params.embed.embedding"],
                [".zarray", "0.0", "1.0", "2.0", "3.0"],
                "{dir}"
            );
        }
    }

    #[test]
    fn lookups_read_the_same_values_as_the_listing() {
        let db = Db::open(Dir(fixture("ocdbt/ckpt"))).expect("open");
        let all = db.list(b"").expect("list");
        let keys: Vec<&[u8]> = all.iter().map(|e| e.key.as_slice()).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted, "keys in order");
        for e in &all {
            assert_eq!(db.get(&e.key).expect("get").as_ref(), Some(&e.value));
        }
        assert_eq!(db.get(b"no such key").expect("get"), None);
        assert_eq!(db.get(b"").expect("get"), None);
        // A prefix lists that array's keys only.
        let emb = db.list(b"params.embed.embedding/").expect("list");
        assert_eq!(emb.len(), 5);
        // The metadata is JSON Orbax wrote: zarr v2, the array's shape.
        let Some(Value::Inline(meta)) = db.get(b"params.embed.embedding/.zarray").expect("get")
        else {
            panic!("metadata not inline");
        };
        let meta: serde_json::Value = serde_json::from_slice(&meta).expect("json");
        assert_eq!(meta["zarr_format"], 2);
        assert_eq!(meta["shape"], serde_json::json!([128, 64]));
    }

    /// A value's bytes: inline, or read from its data file.
    fn value_bytes(db: &Db<Dir>, v: &Value) -> Vec<u8> {
        match v {
            Value::Inline(b) => b.clone(),
            Value::Indirect(r) => db.files.read(&r.path, r.offset, r.length).expect("value"),
        }
    }

    #[test]
    fn every_array_is_what_orbax_restored() {
        use super::super::zarr::ArrayMeta;
        // Orbax's default writes zarr v2 (`.zarray`); Keras's OrbaxCheckpoint (Orbax's v1 API)
        // zarr v3 with sharded chunks (`zarr.json`, `c/...`), its arrays under the item `pytree`.
        for (dir, name) in [
            ("ocdbt/ckpt", "ocdbt"),
            ("manager/9/default", "manager_9"),
            ("keras/orbax/1/pytree", "keras_1"),
        ] {
            let db = Db::open(Dir(fixture(dir))).expect("open");
            let mut checked = 0;
            for (key, (dtype, _, digest)) in expected(name) {
                // Keras's items: `pytree/...` is this database; `model_config` is not an array.
                let array = match (name.starts_with("keras"), key.strip_prefix("pytree/")) {
                    (false, _) => key.replace('/', "."),
                    (true, Some(k)) => k.replace('/', "."),
                    (true, None) => continue,
                };
                let meta = [".zarray", "zarr.json"]
                    .iter()
                    .find_map(|m| db.get(format!("{array}/{m}").as_bytes()).expect("get"))
                    .unwrap_or_else(|| panic!("{dir}: no metadata of {array}"));
                let meta = ArrayMeta::parse(&value_bytes(&db, &meta)).expect(&array);
                let mut chunk =
                    |i: &[u64]| -> Result<Option<std::sync::Arc<Vec<u8>>>, FormatError> {
                        let (k, pos) = meta.stored_at(i);
                        Ok(match db.get(format!("{array}/{k}").as_bytes())? {
                            Some(v) => meta
                                .decode_at(&value_bytes(&db, &v), pos)?
                                .map(std::sync::Arc::new),
                            None => None,
                        })
                    };
                let bytes = meta.read(0, usize::MAX, &mut chunk).expect("read");
                assert_eq!(sha(&bytes), digest, "{dir}: {array}");
                assert_eq!(meta.dtype.display_name(), dtype, "{dir}: {array}");
                checked += 1;
            }
            assert!(checked >= 4, "{dir}: {checked} arrays");
        }
    }

    #[test]
    fn keys_of_a_keras_checkpoint_are_zarr_v3() {
        let db = Db::open(Dir(fixture("keras/orbax/1/pytree"))).expect("open");
        let keys: Vec<String> = db
            .list(b"")
            .expect("list")
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e.key).into_owned())
            .collect();
        assert!(
            keys.contains(&"trainable_variables.sequential.hidden.kernel/zarr.json".to_string()),
            "{keys:?}"
        );
        assert!(
            keys.contains(&"trainable_variables.sequential.hidden.kernel/c/0/0".to_string()),
            "{keys:?}"
        );
        assert!(!keys.iter().any(|k| k.ends_with("/.zarray")), "{keys:?}");
    }

    /// An encoded node: the outer header, `body` uncompressed, the CRC-32C.
    fn encode(magic: u32, body: &[u8]) -> Vec<u8> {
        let mut e = magic.to_be_bytes().to_vec();
        let len = (4 + 8 + 2 + body.len() + 4) as u64;
        e.extend_from_slice(&len.to_le_bytes());
        e.extend_from_slice(&[0, 0]); // version 0, no compression
        e.extend_from_slice(body);
        let crc = crc32c::crc32c(&e);
        e.extend_from_slice(&crc.to_le_bytes());
        e
    }

    #[test]
    fn an_indirect_value_may_be_longer_than_its_node() {
        // A leaf of height 0 with one data file `d/x` and two entries: `a/0` indirect, 3876503
        // bytes at offset 7 of `d/x` (a 4 MiB chunk: what Orbax writes for a large array), and
        // `a/1` inline, 2 bytes.
        let mut b = vec![0u8]; // height
        b.extend_from_slice(&[1, 3, 0]); // one file: suffix length 3, base length 0
        b.extend_from_slice(b"d/x");
        b.push(2); // entries
        b.push(2); // key prefix length of the second
        b.extend_from_slice(&[3, 1]); // suffix lengths
        b.extend_from_slice(b"a/01");
        let mut len = Vec::new();
        crate::parse::varint::encode_u64(3_876_503, &mut len);
        b.extend_from_slice(&len);
        b.push(2); // the inline value's length
        b.extend_from_slice(&[1, 0]); // kinds: indirect, inline
        b.push(0); // the indirect value's file
        b.push(7); // and offset
        b.extend_from_slice(b"hi");
        let Node::Leaf(entries) = Node::parse(&encode(BTREE_MAGIC, &b), b"", b"").expect("parse")
        else {
            panic!("not a leaf");
        };
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].key, b"a/0");
        assert_eq!(
            entries[0].value,
            Value::Indirect(NodeRef {
                path: b"d/x".to_vec(),
                offset: 7,
                length: 3_876_503,
                base: Vec::new(),
            })
        );
        assert_eq!(entries[1].value, Value::Inline(b"hi".to_vec()));
        // An inline value longer than the node is an error, not a read past it.
        let mut long = b.clone();
        let at = long.len() - 2 - 1 - 1 - 2 - 1; // the inline length byte
        long[at] = 100;
        assert!(Node::parse(&encode(BTREE_MAGIC, &long), b"", b"").is_err());
    }

    #[test]
    fn damaged_manifests_and_nodes_are_errors() {
        let dir = fixture("ocdbt/ckpt");
        let manifest = std::fs::read(dir.join("manifest.ocdbt")).expect("manifest");
        for cut in 0..manifest.len() {
            assert!(Manifest::parse(&manifest[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..manifest.len() * 8 {
            let mut m = manifest.clone();
            m[i / 8] ^= 1 << (i % 8);
            // Every flip is caught by the length, the magic or the CRC-32C.
            assert!(Manifest::parse(&m).is_err(), "bit {i}");
        }
        // Nodes: a root node truncated or flipped is an error, never a panic.
        let db = Db::open(Dir(dir)).expect("open");
        let (root, _) = db.manifest.root.clone().expect("root");
        let enc = db
            .files
            .read(&root.path, root.offset, root.length)
            .expect("node");
        for cut in 0..enc.len() {
            assert!(Node::parse(&enc[..cut], b"", b"").is_err(), "cut at {cut}");
        }
        let mut rng = crate::testkit::rng::Rng::new(28);
        for _ in 0..2000 {
            let mut n = enc.clone();
            let i = rng.index(n.len() * 8);
            n[i / 8] ^= 1 << (i % 8);
            assert!(Node::parse(&n, b"", b"").is_err(), "bit {i}");
        }
    }
}
