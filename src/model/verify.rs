//! `tfmount verify SOURCE`: reads every tensor of every checkpoint in SOURCE and checks its
//! bytes against the CRC-32C stored in the index (V1, which stores none: reads every byte, which
//! the core checks against its table block's CRC-32C). One `KEY<TAB>REASON` line per problem on
//! stdout, a progress bar on stderr when it is a terminal, one summary line on stderr.
//!
//! Tensors are taken in batches, in key order; the stored pieces of a batch (whole tensors and
//! slices of partitioned ones) are cut into chunks that threads read and checksum in parallel;
//! the chunks' CRCs are combined in order (`crc32c_combine`) and compared with the stored one.
//! A single large tensor thus uses every thread too.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::lines::{closed, Lines, Val};
use super::open::{show_extent, CheckpointSet, Ckpt, Item, Piece, SourceProblem, TensorInfo};

/// Bytes read and checksummed as one unit of work.
const CHUNK: u64 = 8 << 20;
/// Bytes read at a time within a unit: small enough to be checksummed while still in the
/// CPU's cache after the copy from the page cache.
const READ: u64 = 256 << 10;
/// Chunks a thread takes at once: one of at least this many bytes, or up to this many.
const GROUP_BYTES: u64 = 1 << 20;
const GROUP_CHUNKS: usize = 256;
/// Tensors and stored bytes planned at a time (bounds memory whatever the checkpoint's size).
const BATCH_TENSORS: usize = 4096;
const BATCH_BYTES: u64 = 512 << 20;

/// What `tfmount verify SOURCE` finds, as `(key, reason)` in the order it prints them (keys
/// unescaped); `Err` when SOURCE cannot be used, with the message `verify` prints.
#[cfg(feature = "python")]
pub(crate) fn problems(
    source: &Path,
    threads: Option<usize>,
) -> Result<Vec<(Vec<u8>, String)>, String> {
    let v = verify(source, threads, Lines::kept(), false, &[])?;
    Ok(v.out
        .into_pairs()
        .into_iter()
        .map(|(key, reason)| (key, String::from_utf8_lossy(&reason).into_owned()))
        .collect())
}

/// Checks every checkpoint of `source` (only the tensors whose key, as printed, starts with one
/// of `only`, when given), its problems written to `out`.
pub(crate) fn verify(
    source: &Path,
    threads: Option<usize>,
    out: Lines,
    progress: bool,
    only: &[Vec<u8>],
) -> Result<Verifier, String> {
    let set = match CheckpointSet::open(source) {
        Ok(s) => s,
        Err(e @ (SourceProblem::Unusable(_) | SourceProblem::NoCheckpoint(_))) => {
            return Err(e.to_string())
        }
    };
    let threads = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let progress = if progress {
        progress_bar(&set, only)
    } else {
        ProgressBar::hidden()
    };
    let mut v = Verifier {
        out,
        threads: threads.max(1),
        progress,
        tensors: 0,
        bytes: AtomicU64::new(0),
        problems: 0,
        unchecked: 0,
        no_checksum: None,
        closed: false,
        only: only.to_vec(),
    };
    for m in &set.members {
        match &m.opened {
            Ok(ck) => v.checkpoint(&m.name, ck),
            Err(e) => v.problem(&m.name, b"[checkpoint]", e),
        }
        if v.closed {
            break;
        }
    }
    Ok(v)
}

/// A bar counting bytes, drawn only when stderr is a terminal. Its length comes from a walk of
/// the indexes (index blocks only, no tensor data), done only then.
fn progress_bar(set: &CheckpointSet, only: &[Vec<u8>]) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let mut total = 0u64;
    for m in &set.members {
        let Ok(ck) = &m.opened else { continue };
        for item in ck.walk() {
            if let Item::Tensor(t) = item {
                if !chosen(only, &m.name, &t.key) {
                    continue;
                }
                total += if t.partitioned {
                    ck.pieces(&t)
                        .map(|p| p.iter().map(|p| p.nbytes).sum())
                        .unwrap_or(0)
                } else {
                    t.nbytes
                };
            }
        }
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Whether the tensor `key` of the checkpoint `name` (`""`, or `ckpt-1/` in a directory) is
/// one of those `only` chooses (all when empty).
fn chosen(only: &[Vec<u8>], name: &str, key: &[u8]) -> bool {
    only.is_empty()
        || only.iter().any(|p| {
            let full = [name.as_bytes(), key].concat();
            full.starts_with(p) || key.starts_with(p)
        })
}

pub(crate) struct Verifier {
    pub(crate) out: Lines,
    pub(crate) threads: usize,
    pub(crate) progress: ProgressBar,
    pub(crate) tensors: u64,
    pub(crate) bytes: AtomicU64,
    pub(crate) problems: u64,
    /// Tensors checked in a format that stores no checksum (their layout, not their bytes),
    /// and what to say of it (the last such format's words).
    pub(crate) unchecked: u64,
    pub(crate) no_checksum: Option<&'static str>,
    /// stdout was closed: stop.
    pub(crate) closed: bool,
    /// Key prefixes of the tensors to check (all when empty).
    pub(crate) only: Vec<Vec<u8>>,
}

/// A tensor of the batch and what is known of it so far.
struct Planned {
    key: Vec<u8>,
    pieces: Vec<Piece>,
    /// Problems found while planning (missing slices, a missing data file, ...).
    problems: Vec<String>,
    /// The chunks of each piece in the batch's chunk list, `(first, count)` (`None`: not read).
    chunks_of: Vec<Option<(usize, usize)>>,
}

/// One unit of work: bytes `[start, start + len)` of a piece (`len` 0 = check the whole piece
/// through the core: strings and variants).
struct Chunk {
    tensor: usize,
    piece: usize,
    start: u64,
    len: u64,
}

impl Verifier {
    pub(crate) fn problem(&mut self, name: &str, key: &[u8], reason: &str) {
        self.problems += 1;
        if self.closed {
            return;
        }
        let k = [name.as_bytes(), key].concat();
        let fields = [
            ("key", Val::Bytes(&k)),
            ("problem", Val::Bytes(reason.as_bytes())),
        ];
        if let Err(e) = self.out.record("problem", &fields) {
            if !closed(&e) {
                eprintln!("tfmount verify: stdout: {e}");
            }
            self.closed = true;
        }
    }

    fn checkpoint(&mut self, name: &str, ck: &Ckpt) {
        let mut batch: Vec<Planned> = Vec::new();
        let mut batch_bytes = 0u64;
        for item in ck.walk() {
            match item {
                Item::Tensor(t) if !chosen(&self.only, name, &t.key) => {}
                Item::Tensor(t) => {
                    if ck.no_checksum.is_some() {
                        self.unchecked += 1;
                        self.no_checksum = ck.no_checksum;
                    }
                    let p = self.plan(ck, t);
                    batch_bytes += p.pieces.iter().map(|p| p.nbytes).sum::<u64>();
                    batch.push(p);
                    if batch.len() >= BATCH_TENSORS || batch_bytes >= BATCH_BYTES {
                        self.run_batch(name, ck, std::mem::take(&mut batch));
                        batch_bytes = 0;
                    }
                }
                Item::BadEntry { key, reason } => {
                    self.run_batch(name, ck, std::mem::take(&mut batch));
                    batch_bytes = 0;
                    self.tensors += 1;
                    self.problem(name, &key, &reason);
                }
                Item::BadBlock {
                    block,
                    blocks,
                    after,
                    up_to,
                    reason,
                } => {
                    self.run_batch(name, ck, std::mem::take(&mut batch));
                    batch_bytes = 0;
                    let esc = |k: &[u8]| {
                        String::from_utf8_lossy(&crate::model::lines::escape(k)).into_owned()
                    };
                    let range = match (after, up_to) {
                        (Some(a), Some(u)) => {
                            format!("; it holds the keys in ({}, {}]", esc(&a), esc(&u))
                        }
                        (None, Some(u)) => format!("; it holds the keys up to {}", esc(&u)),
                        (Some(a), None) => format!("; it holds the keys after {}", esc(&a)),
                        (None, None) => String::new(),
                    };
                    let what = format!("[index block {}/{}]", block + 1, blocks);
                    self.problem(
                        name,
                        what.as_bytes(),
                        &format!("unreadable index block: {reason}{range}"),
                    );
                }
                Item::MissingShard {
                    shard,
                    shards,
                    file,
                } => {
                    let what = format!("[shard {}/{}]", shard + 1, shards);
                    let reason = format!(
                        "checkpoint file {} is missing (the tensors stored only in it are not known)",
                        file.display()
                    );
                    self.problem(name, what.as_bytes(), &reason);
                }
            }
            if self.closed {
                return;
            }
        }
        self.run_batch(name, ck, batch);
        if !self.only.is_empty() {
            return;
        }
        for (what, r) in ck.file_checks() {
            match r {
                Ok(n) => {
                    self.bytes.fetch_add(n, Ordering::Relaxed);
                    self.progress.inc(n);
                }
                Err(e) => self.problem(name, &what, &e),
            }
            if self.closed {
                return;
            }
        }
    }

    /// The pieces of a tensor, and the problems visible without reading its bytes.
    fn plan(&self, ck: &Ckpt, t: TensorInfo) -> Planned {
        let mut problems = Vec::new();
        let pieces = match ck.pieces(&t) {
            Ok(p) => p,
            Err(e) => {
                problems.push(e);
                Vec::new()
            }
        };
        for p in &pieces {
            if let Err(e) = ck.piece_present(p) {
                problems.push(label(p, &e));
            }
        }
        Planned {
            key: t.key,
            chunks_of: vec![None; pieces.len()],
            pieces,
            problems,
        }
    }

    fn run_batch(&mut self, name: &str, ck: &Ckpt, mut batch: Vec<Planned>) {
        if batch.is_empty() {
            return;
        }
        // The chunks of every piece that can be read.
        let mut chunks = Vec::new();
        for (ti, t) in batch.iter_mut().enumerate() {
            if !t.problems.is_empty() {
                continue;
            }
            for (pi, p) in t.pieces.iter().enumerate() {
                let first = chunks.len();
                if p.checked_by_core {
                    chunks.push(Chunk {
                        tensor: ti,
                        piece: pi,
                        start: 0,
                        len: 0,
                    });
                    t.chunks_of[pi] = Some((first, 1));
                    continue;
                }
                let mut start = 0;
                loop {
                    let len = (p.nbytes - start).min(CHUNK);
                    chunks.push(Chunk {
                        tensor: ti,
                        piece: pi,
                        start,
                        len,
                    });
                    start += len;
                    if start >= p.nbytes {
                        break;
                    }
                }
                t.chunks_of[pi] = Some((first, chunks.len() - first));
            }
        }
        let results: Vec<OnceLock<Result<u32, String>>> =
            (0..chunks.len()).map(|_| OnceLock::new()).collect();
        // Threads take groups of consecutive chunks (one large chunk, or up to GROUP_CHUNKS
        // small ones adding up to GROUP_BYTES), so that small tensors do not make every thread
        // meet on shared counters for each one.
        let mut groups = Vec::new();
        let mut from = 0;
        let mut bytes = 0u64;
        for (i, c) in chunks.iter().enumerate() {
            bytes += if c.len == 0 {
                batch[c.tensor].pieces[c.piece].nbytes
            } else {
                c.len
            };
            if bytes >= GROUP_BYTES || i + 1 - from >= GROUP_CHUNKS || i + 1 == chunks.len() {
                groups.push(from..i + 1);
                from = i + 1;
                bytes = 0;
            }
        }
        let next = AtomicUsize::new(0);
        let work = || loop {
            let g = next.fetch_add(1, Ordering::Relaxed);
            let Some(range) = groups.get(g) else { break };
            let mut done = 0u64;
            for i in range.clone() {
                let c = &chunks[i];
                let p = &batch[c.tensor].pieces[c.piece];
                let r = if p.checked_by_core {
                    ck.check_piece(p).map(|()| 0)
                } else {
                    chunk_crc(ck, p, c.start, c.len)
                };
                done += if p.checked_by_core { p.nbytes } else { c.len };
                let _ = results[i].set(r);
            }
            self.bytes.fetch_add(done, Ordering::Relaxed);
            self.progress.inc(done);
        };
        let threads = self.threads.min(groups.len()).max(1);
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(work);
            }
            work();
        });
        // Each tensor's verdict, in key order.
        for t in &batch {
            self.tensors += 1;
            let mut problems = t.problems.clone();
            for (pi, p) in t.pieces.iter().enumerate() {
                let Some((first, n)) = t.chunks_of[pi] else {
                    continue;
                };
                let r = &results[first..first + n];
                if let Err(e) = piece_verdict(p, &chunks[first..first + n], r) {
                    problems.push(label(p, &e));
                }
            }
            if !problems.is_empty() {
                self.problem(name, &t.key, &problems.join("; "));
            }
            if self.closed {
                return;
            }
        }
    }
}

/// Checks every stored piece of `t` against what its format stores to check it by (a CRC-32C,
/// or the format's own check), on this thread: the problem in words, naming the file (and the
/// slice of a partitioned tensor). For `export`, which copies no tensor that fails.
pub(crate) fn check_tensor(ck: &Ckpt, t: &TensorInfo) -> Result<(), String> {
    for p in ck.pieces(t)? {
        ck.piece_present(&p).map_err(|e| label(&p, &e))?;
        if p.checked_by_core {
            ck.check_piece(&p).map_err(|e| label(&p, &e))?;
            continue;
        }
        let crc = chunk_crc(ck, &p, 0, p.nbytes).map_err(|e| label(&p, &e))?;
        match p.crc {
            Some(stored) if stored != crc => {
                return Err(label(
                    &p,
                    &format!(
                        "CRC-32C mismatch in {} (stored {stored:#010x}, computed {crc:#010x})",
                        p.file.display()
                    ),
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// The CRC-32C of bytes `[start, start + len)` of a piece, read [`READ`] bytes at a time.
fn chunk_crc(ck: &Ckpt, p: &Piece, start: u64, len: u64) -> Result<u32, String> {
    let mut crc = 0u32;
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(READ);
        let got = ck.read_piece(p, start + done, n as usize, |b| {
            crc = crc32c::crc32c_append(crc, b);
            b.len() as u64
        })?;
        if got != n {
            return Err(format!(
                "{}: {got} bytes read at {} of the tensor, {n} expected",
                p.file.display(),
                start + done
            ));
        }
        done += n;
    }
    Ok(crc)
}

/// Combines the CRCs of a piece's chunks, in order, and compares the result with the stored
/// CRC-32C (a piece checked by the core has one chunk, its verdict).
fn piece_verdict(
    p: &Piece,
    chunks: &[Chunk],
    results: &[OnceLock<Result<u32, String>>],
) -> Result<(), String> {
    let mut crc = 0u32;
    for (c, r) in chunks.iter().zip(results) {
        let v = match r.get() {
            Some(Ok(v)) => *v,
            Some(Err(e)) => return Err(e.clone()),
            None => return Err("not read".into()),
        };
        if p.checked_by_core {
            return Ok(());
        }
        crc = if c.start == 0 {
            v
        } else {
            crc32c::crc32c_combine(crc, v, c.len as usize)
        };
    }
    match p.crc {
        Some(stored) if stored != crc => Err(format!(
            "CRC-32C mismatch in {} (stored {stored:#010x}, computed {crc:#010x})",
            p.file.display()
        )),
        _ => Ok(()),
    }
}

/// A piece's problem, naming the slice for a slice of a partitioned tensor.
fn label(p: &Piece, e: &str) -> String {
    if p.extent.is_empty() {
        e.to_string()
    } else {
        format!("slice {}: {e}", show_extent(&p.extent))
    }
}
