//! Writing a V2 checkpoint (tf-format.md §1–§4) with the guarantees of TensorFlow's own saver:
//! nothing at `OUT` until it is whole. Tensors are streamed into data files under temporary
//! names in `OUT`'s directory (`.NAME.tfmount-tmp-PID.data-K`), each tensor's CRC-32C computed
//! as its bytes go out; [`BundleWriter::finish`] then `fsync`s them, reads every written byte
//! back against its tensor's CRC, writes the index (sorted keys, the header entry first) under a
//! temporary name, reads it back through the crate's own table reader, renames the data files
//! to `OUT.data-%05d-of-%05d` and the index to `OUT.index` **last**, and `fsync`s the directory.
//! A reader that sees `OUT.index` sees a whole checkpoint. Any failure removes the temporaries;
//! a killed writer's are removed by the next writer in that directory (their process gone).
//!
//! A tensor whose bytes lie as they are in a local file with a stored CRC-32C (a whole V2
//! tensor) is copied by the kernel instead ([`BundleWriter::add_copied`]) and read back against
//! that CRC on a thread beside the writing ([`crate::formats::output::Verifier`]), waited for in
//! `finish` before anything is renamed, not read again there.
//!
//! Memory is bounded by one buffer per open data file ([`BUF`]) and the index's entries (a key
//! and ~40 bytes per tensor), never by a tensor's size.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use prost::Message;

use crate::formats::output::{copy_range, named, stream, ReadBack, Target, Verifier};
use crate::parse::dtype::{DType, DT_STRING};
use crate::parse::table_build::TableBuilder;
use crate::parse::{mask_crc, varint};
use crate::proto::{BundleEntryProto, BundleHeaderProto, TensorShapeProto, VersionDef};

/// Bytes buffered per data file, and read at a time when written bytes are read back.
const BUF: usize = 1 << 20;

/// `OUT.data-SSSSS-of-NNNNN` (tf-format.md §1).
pub(crate) fn data_path(out: &Path, shard: u32, shards: u32) -> PathBuf {
    let mut s = out.as_os_str().to_os_string();
    s.push(format!(".data-{shard:05}-of-{shards:05}"));
    PathBuf::from(s)
}

/// `OUT.index`.
pub(crate) fn index_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_os_string();
    s.push(".index");
    PathBuf::from(s)
}

/// One tensor written: where its bytes are, and the CRC-32C of the bytes as written (for a
/// string tensor not the entry's, which is computed another way: tf-format.md §4.2).
struct Written {
    key: Vec<u8>,
    entry: BundleEntryProto,
    raw: u32,
    /// Read back already (copied by the kernel, then read back against the source's CRC).
    read_back: bool,
}

/// One data file being written.
struct Shard {
    path: PathBuf,
    out: BufWriter<File>,
    len: u64,
}

/// A V2 checkpoint being written to `OUT` (see the module's docs).
pub(crate) struct BundleWriter {
    out: PathBuf,
    target: Target,
    /// A new data file is started when a tensor would take the current one past this.
    shard_size: u64,
    shards: Vec<Shard>,
    written: Vec<Written>,
    keys: std::collections::HashSet<Vec<u8>>,
    /// Reads back what the kernel copied while the next tensor is written.
    verifier: Verifier,
    finished: bool,
}

/// What [`BundleWriter::finish`] wrote.
#[derive(Debug, Clone)]
pub(crate) struct Wrote {
    pub(crate) bytes: u64,
    pub(crate) files: Vec<PathBuf>,
}

impl BundleWriter {
    /// A writer of the checkpoint `out` (a prefix: `out.index`, `out.data-*`; its directory made
    /// if missing); `shard_size`
    /// bytes per data file at most (a tensor larger than it has one of its own; `None`: one
    /// file). `out` existing (its `.index`) is refused unless `force`.
    pub(crate) fn create(out: &Path, shard_size: Option<u64>, force: bool) -> Result<Self, String> {
        let index = index_path(out);
        if !force && fs::symlink_metadata(&index).is_ok() {
            return Err(format!(
                "{}: exists (a checkpoint is there; --force replaces it)",
                index.display()
            ));
        }
        let target = Target::new(out)?;
        Ok(BundleWriter {
            out: out.to_path_buf(),
            target,
            shard_size: shard_size.unwrap_or(u64::MAX).max(1),
            shards: Vec::new(),
            written: Vec::new(),
            keys: std::collections::HashSet::new(),
            verifier: Verifier::new(),
            finished: false,
        })
    }

    fn tmp_index(&self) -> PathBuf {
        self.target.tmp(".index")
    }

    /// The data file a tensor of `size` bytes goes into (a new one when it would pass the
    /// shard size).
    fn shard_for(&mut self, size: u64) -> Result<usize, String> {
        let need_new = match self.shards.last() {
            None => true,
            Some(s) => s.len > 0 && s.len.saturating_add(size) > self.shard_size,
        };
        if need_new {
            let (path, out) = self
                .target
                .create(&format!(".data-{}", self.shards.len()), BUF)?;
            self.shards.push(Shard { path, out, len: 0 });
        }
        Ok(self.shards.len() - 1)
    }

    fn check_key(&mut self, key: &[u8]) -> Result<(), String> {
        if key.is_empty() {
            return Err("a tensor's key is empty (the header's key)".into());
        }
        if !self.keys.insert(key.to_vec()) {
            return Err(format!(
                "{}: two tensors with this key",
                String::from_utf8_lossy(key)
            ));
        }
        Ok(())
    }

    /// Adds a tensor of a fixed-size dtype: `size` bytes (its element count times its element
    /// size), handed over by `fill` through the sink it is given, in order; returns their
    /// CRC-32C. Fails if `fill` does, or hands over another number of bytes.
    pub(crate) fn add(
        &mut self,
        key: &[u8],
        dtype: DType,
        shape: &[u64],
        fill: impl FnOnce(&mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String>,
    ) -> Result<u32, String> {
        let show = String::from_utf8_lossy(key).into_owned();
        let esize = dtype
            .elem_size()
            .filter(|_| dtype != DT_STRING)
            .ok_or_else(|| format!("{show}: {} has no fixed size", dtype.display_name()))?;
        let size = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(esize as u64))
            .ok_or_else(|| format!("{show}: shape {shape:?} too large"))?;
        self.push(key, dtype, shape, size, None, fill)
    }

    /// Streams `size` bytes from `fill` into a data file as the tensor `key`; its entry's
    /// CRC-32C is `entry_crc`, or (`None`) that of the bytes. Returns the bytes' CRC-32C.
    fn push(
        &mut self,
        key: &[u8],
        dtype: DType,
        shape: &[u64],
        size: u64,
        entry_crc: Option<u32>,
        fill: impl FnOnce(&mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String>,
    ) -> Result<u32, String> {
        self.check_key(key)?;
        let k = self.shard_for(size)?;
        let shard = &mut self.shards[k];
        let offset = shard.len;
        // Its errors name the file, not the tensor: the caller names it.
        let crc = stream(&mut shard.out, &shard.path, size, fill)?;
        shard.len += size;
        self.written.push(Written {
            key: key.to_vec(),
            entry: entry(dtype, shape, k, offset, size, entry_crc.unwrap_or(crc)),
            raw: crc,
            read_back: false,
        });
        Ok(crc)
    }

    /// Adds a tensor of a fixed-size dtype whose bytes are `size` bytes of the local file
    /// `src` from `offset`, stored there with the CRC-32C `stored_crc` (a V2 tensor): copied by
    /// the kernel ([`copy_range`]), then read back at once against `stored_crc`, which checks
    /// the source and the copy in one pass. `Ok(false)`, nothing added, where the kernel cannot
    /// copy between the two files (the caller streams the tensor instead).
    pub(crate) fn add_copied(
        &mut self,
        key: &[u8],
        dtype: DType,
        shape: &[u64],
        size: u64,
        (src, src_path, offset): (&File, &Path, u64),
        stored_crc: u32,
    ) -> Result<bool, String> {
        if self.keys.contains(key) {
            return Err(format!(
                "{}: two tensors with this key",
                String::from_utf8_lossy(key)
            ));
        }
        let k = self.shard_for(size)?;
        let shard = &mut self.shards[k];
        shard.out.flush().map_err(|e| named(&shard.path, e))?;
        let at = shard.len;
        if !copy_range(src, offset, shard.out.get_ref(), &shard.path, size)? {
            return Ok(false);
        }
        shard.len += size;
        let what = format!(
            "{}: CRC-32C mismatch in its copy from {} at {offset}",
            String::from_utf8_lossy(key),
            src_path.display()
        );
        self.verifier
            .check(&shard.path, at, shard.len, stored_crc, what)?;
        self.check_key(key)?;
        self.written.push(Written {
            key: key.to_vec(),
            entry: entry(dtype, shape, k, at, size, stored_crc),
            raw: stored_crc,
            read_back: true,
        });
        Ok(true)
    }

    /// The first error the read-back of a copied tensor found so far (asked before each
    /// tensor: the export stops there).
    pub(crate) fn failed(&self) -> Option<String> {
        self.verifier.failed()
    }

    /// Adds a tensor whose stored bytes are copied as they are: a variant of a V2 checkpoint
    /// (tf-format.md §4.3: each element's length, its serialized `VariantTensorDataProto` and a
    /// running checksum), `size` bytes handed over by `fill`. `entry_crc` is the source entry's
    /// CRC-32C (unmasked), kept: for a variant it is not the CRC-32C of the bytes, and the
    /// caller checks the source tensor against it. Returns the CRC-32C of the bytes.
    pub(crate) fn add_stored(
        &mut self,
        key: &[u8],
        dtype: DType,
        shape: &[u64],
        size: u64,
        entry_crc: u32,
        fill: impl FnOnce(&mut dyn FnMut(&[u8]) -> Result<(), String>) -> Result<(), String>,
    ) -> Result<u32, String> {
        self.push(key, dtype, shape, size, Some(entry_crc), fill)
    }

    /// Adds a string tensor (tf-format.md §4.2) of `n` elements, given as tfmount serves them
    /// (each an 8-byte little-endian length, then its bytes): `read(at, len)` returns bytes
    /// `[at, at + len)` of that layout, `served` bytes long. Read twice: the lengths first (the
    /// stored layout puts them all before the bytes), then the bytes.
    pub(crate) fn add_strings(
        &mut self,
        key: &[u8],
        shape: &[u64],
        served: u64,
        read: &mut dyn FnMut(u64, usize) -> Result<Vec<u8>, String>,
    ) -> Result<(), String> {
        let show = String::from_utf8_lossy(key).into_owned();
        let n = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| format!("{show}: shape {shape:?} too large"))?;
        // The lengths: one pass over the served layout, its bytes skipped.
        let mut lens = Vec::new();
        let mut at = 0u64;
        for _ in 0..n {
            let b = read(at, 8)?;
            let len: [u8; 8] = b
                .as_slice()
                .try_into()
                .map_err(|_| format!("{show}: served strings end early at byte {at}"))?;
            let len = u64::from_le_bytes(len);
            lens.push(len);
            at = at
                .checked_add(8)
                .and_then(|a| a.checked_add(len))
                .filter(|&a| a <= served)
                .ok_or_else(|| format!("{show}: served strings overrun their {served} bytes"))?;
        }
        if at != served {
            return Err(format!(
                "{show}: {served} served bytes, {at} used by {n} strings"
            ));
        }
        self.check_key(key)?;
        let mut head = Vec::new();
        let mut crc = 0u32;
        for &len in &lens {
            varint::encode_u64(len, &mut head);
            crc = match u32::try_from(len) {
                Ok(l) => crc32c::crc32c_append(crc, &l.to_le_bytes()),
                Err(_) => crc32c::crc32c_append(crc, &len.to_le_bytes()),
            };
        }
        let check = mask_crc(crc).to_le_bytes();
        head.extend_from_slice(&check);
        crc = crc32c::crc32c_append(crc, &check);
        let size = head.len() as u64 + (served - 8 * n);
        let k = self.shard_for(size)?;
        let shard = &mut self.shards[k];
        let offset = shard.len;
        let mut raw = crc32c::crc32c(&head);
        shard
            .out
            .write_all(&head)
            .map_err(|e| named(&shard.path, e))?;
        let mut at = 0u64;
        for &len in &lens {
            at += 8;
            let mut done = 0u64;
            while done < len {
                let want = (len - done).min(BUF as u64) as usize;
                let b = read(at + done, want)?;
                if b.len() != want {
                    return Err(format!("{show}: served strings changed while read"));
                }
                crc = crc32c::crc32c_append(crc, &b);
                raw = crc32c::crc32c_append(raw, &b);
                shard.out.write_all(&b).map_err(|e| named(&shard.path, e))?;
                done += want as u64;
            }
            at += len;
        }
        shard.len += size;
        self.written.push(Written {
            key: key.to_vec(),
            entry: entry(DT_STRING, shape, k, offset, size, crc),
            raw,
            read_back: false,
        });
        Ok(())
    }

    /// Bytes of tensor data added so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.shards.iter().map(|s| s.len).sum()
    }

    /// Makes the checkpoint whole at `OUT` (see the module's docs); on failure nothing is left
    /// at `OUT` (a checkpoint replaced with `--force` is gone) and the temporaries are removed.
    pub(crate) fn finish(mut self) -> Result<Wrote, String> {
        let r = self.finish_inner();
        if r.is_ok() {
            self.finished = true;
        }
        r
    }

    fn finish_inner(&mut self) -> Result<Wrote, String> {
        if self.shards.is_empty() {
            // TensorFlow writes a data file even for a checkpoint of no tensors.
            self.shard_for(0)?;
        }
        for s in &mut self.shards {
            s.out.flush().map_err(|e| named(&s.path, e))?;
            s.out.get_ref().sync_all().map_err(|e| named(&s.path, e))?;
        }
        self.verifier.finish()?;
        self.read_back()?;
        let shards = u32::try_from(self.shards.len()).map_err(|_| "too many data files")?;
        // The index: the header, then the entries in bytewise key order.
        let tmp_index = self.tmp_index();
        let f = File::options()
            .write(true)
            .create_new(true)
            .open(&tmp_index)
            .map_err(|e| named(&tmp_index, e))?;
        let mut t = TableBuilder::new(BufWriter::with_capacity(BUF, f));
        let header = BundleHeaderProto {
            num_shards: shards as i32,
            endianness: 0,
            version: Some(VersionDef {
                producer: 1,
                min_consumer: 0,
                bad_consumers: Vec::new(),
            }),
        };
        let io = |e| named(&tmp_index, e);
        t.add(b"", &header.encode_to_vec()).map_err(io)?;
        self.written.sort_by(|a, b| a.key.cmp(&b.key));
        for w in &self.written {
            t.add(&w.key, &w.entry.encode_to_vec()).map_err(io)?;
        }
        let (out, _) = t.finish().map_err(io)?;
        let f = out.into_inner().map_err(|e| io(e.into_error()))?;
        f.sync_all().map_err(io)?;
        self.check_index(&tmp_index)?;
        // Into place: whatever was at OUT first leaves (its index first), then the data files,
        // the index last.
        let index = index_path(&self.out);
        if fs::symlink_metadata(&index).is_ok() {
            fs::remove_file(&index).map_err(|e| named(&index, e))?;
        }
        let mut files = Vec::new();
        for (k, s) in self.shards.iter().enumerate() {
            let to = data_path(&self.out, k as u32, shards);
            fs::rename(&s.path, &to).map_err(|e| named(&to, e))?;
            files.push(to);
        }
        fs::rename(&tmp_index, &index).map_err(|e| named(&index, e))?;
        files.push(index);
        self.target.sync_dir();
        self.remove_old_data(shards);
        Ok(Wrote {
            bytes: self.bytes(),
            files,
        })
    }

    /// Reads every tensor back from the data files and checks it against the CRC-32C computed
    /// as it was written ([`ReadBack`]: from a mapping where the process guards them).
    fn read_back(&self) -> Result<(), String> {
        for (k, s) in self.shards.iter().enumerate() {
            let mut rb = ReadBack::new(s.out.get_ref(), &s.path, s.len);
            for w in self
                .written
                .iter()
                .filter(|w| w.entry.shard_id as usize == k && !w.read_back)
            {
                let (at, end) = (
                    w.entry.offset as u64,
                    (w.entry.offset + w.entry.size) as u64,
                );
                let crc = rb.crc(at, end)?;
                if crc != w.raw {
                    return Err(format!(
                        "{}: {} read back differs from what was written (CRC-32C {crc:#010x}, written {:#010x})",
                        s.path.display(),
                        String::from_utf8_lossy(&w.key),
                        w.raw
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads the written index back through the crate's table reader: the header, then every
    /// entry as written.
    fn check_index(&self, path: &Path) -> Result<(), String> {
        let bytes = fs::read(path).map_err(|e| named(path, e))?;
        let bad = |why: String| format!("{}: the index read back is wrong: {why}", path.display());
        let entries = read_table(&bytes).map_err(|e| bad(e.to_string()))?;
        if entries.len() != self.written.len() + 1 {
            return Err(bad(format!(
                "{} entries, {} written",
                entries.len(),
                self.written.len() + 1
            )));
        }
        for ((k, v), w) in entries.iter().skip(1).zip(&self.written) {
            if *k != w.key || *v != w.entry.encode_to_vec() {
                return Err(bad(format!("entry {}", String::from_utf8_lossy(&w.key))));
            }
        }
        Ok(())
    }

    /// Removes data files of a checkpoint that was at `OUT` before with another number of
    /// shards (`--force`): no index names them any more.
    fn remove_old_data(&self, shards: u32) {
        let (Some(name), Ok(rd)) = (
            self.out.file_name().and_then(|n| n.to_str()),
            fs::read_dir(&self.target.dir),
        ) else {
            return;
        };
        let lead = format!("{name}.data-");
        let ours = format!("-of-{shards:05}");
        for e in rd.flatten() {
            let f = e.file_name();
            let Some(rest) = f.to_str().and_then(|f| f.strip_prefix(&lead)) else {
                continue;
            };
            let shaped = rest.len() == 14
                && rest.as_bytes()[5..9] == *b"-of-"
                && rest
                    .bytes()
                    .enumerate()
                    .all(|(i, b)| (5..9).contains(&i) || b.is_ascii_digit());
            if shaped && !rest.ends_with(&ours) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

impl Drop for BundleWriter {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        for s in &self.shards {
            let _ = fs::remove_file(&s.path);
        }
        let _ = fs::remove_file(self.tmp_index());
    }
}

/// Every entry of the table `bytes`, in order, each block's CRC checked.
fn read_table(bytes: &[u8]) -> crate::parse::Result<Vec<(Vec<u8>, Vec<u8>)>> {
    use crate::parse::table::{parse_footer, read_block, Block, BlockHandle};
    let footer = parse_footer(bytes)?;
    let index = Block::parse(read_block(bytes, footer.index)?)?;
    let mut out = Vec::new();
    for i in 0..index.len() {
        let (h, _) = BlockHandle::decode(index.value(i))?;
        let blk = Block::parse(read_block(bytes, h)?)?;
        out.extend((0..blk.len()).map(|j| (blk.key(j).to_vec(), blk.value(j).to_vec())));
    }
    Ok(out)
}

fn entry(
    dtype: DType,
    shape: &[u64],
    shard: usize,
    offset: u64,
    size: u64,
    crc: u32,
) -> BundleEntryProto {
    BundleEntryProto {
        dtype: dtype.0,
        shape: Some(TensorShapeProto {
            dim: shape
                .iter()
                .map(|&d| crate::proto::tensor_shape_proto::Dim {
                    size: d as i64,
                    name: String::new(),
                })
                .collect(),
            unknown_rank: false,
        }),
        shard_id: shard as i32,
        offset: offset as i64,
        size: size as i64,
        crc32c: mask_crc(crc),
        slices: Vec::new(),
    }
}
