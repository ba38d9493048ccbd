//! The persistent disk cache of object storage (`-o cache_dir=DIR,cache_max=SIZE`, or
//! `TFMOUNT_CACHE_DIR` / `TFMOUNT_CACHE_MAX`): pieces of remote objects kept on local disk, so
//! that a second mount (another process, after a reboot) reads local bytes.
//!
//! Layout, under `DIR/tfmount-v2/`:
//! - `lock`: taken (`flock`, exclusive) while pieces are evicted or the cache is cleared;
//! - `objects/<U>/<I>/`: one object version. `U` is a hash of its URL, `I` of its identity
//!   (`size=N etag=E`, or `size=N modified=T` where the store gives no ETag). The directory's
//!   `object` file holds the URL, the identity and the object's size; a directory whose `object`
//!   file names another URL (a hash collision) is not used. An object whose identity changed
//!   gets a new directory, and the old versions of its URL are removed when it is first used:
//!   a changed object never serves old bytes.
//! - `objects/<U>/<I>/<k>.s`: segment `k`, pieces `[k·SEGMENT, (k+1)·SEGMENT)` of the object
//!   (piece `n` is the object's bytes `[n·PIECE, (n+1)·PIECE)`, the last one ending at the
//!   object's end). A segment file starts with one [`SLOT`]-byte slot per piece (its CRC-32C,
//!   its length, the magic `tfmc`, and a CRC-32C of those 12 bytes), zeros where a piece is not
//!   held; piece `i` of the segment is at `HEADER + i·PIECE` (a sparse file: only what is held
//!   takes disk). A piece's bytes are written before its slot, so a reader (another process
//!   sharing `DIR`) that finds a slot finds the bytes; a daemon killed mid-write leaves a piece
//!   without a slot (not there) or, after a crash of the machine, a slot whose bytes did not
//!   reach the disk: every piece read back is checked (slot, length, CRC-32C), and a damaged
//!   one is removed (its slot zeroed), logged once and fetched again, never served. One file
//!   per 64 pieces and not one per piece: creating a file costs the file system far more than
//!   writing a MiB into one (ext4 spent 1.5–5 s of CPU creating the 1,024 files of a GiB,
//!   against 0.25–0.7 s writing the same bytes into 16).
//! - `DIR/tfmount-v1/`, the layout of earlier versions (a file per piece), is removed when a
//!   cache is first opened on `DIR`.
//! - `asked/<S>`: for a SOURCE (`S` a hash of its URL, which the file's first line names), the
//!   keys its last mount asked about after its first probes (a store that cannot list: the
//!   data shards and `.meta` an index names), at most 256: the next mount asks about them in
//!   its first round. Only a hint: what the answers say is what is used.
//!
//! Bounded by `cache_max` (default: half the free space of `DIR`'s file system when the cache is
//! opened, plus what the cache already holds): when the bytes a process has seen written pass
//! it, the least recently used segments (by modification time, refreshed on use at most once a
//! minute) are removed until the cache holds 90% of it, the last of them only in part (its
//! first pieces: the pieces it keeps are copied to a new file renamed over it, so that a reader
//! that opened it before keeps its bytes). Each process counts what it writes and
//! rescans the directory to evict, so two processes sharing `DIR` may together pass `cache_max`
//! by the 10% margin each before one of them rescans.

use crate::sync::lock;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

/// Bytes of one piece (also the block size of random reads, `read::BLOCK`: a block is a piece).
pub(crate) const PIECE: u64 = 1 << 20;
/// The directory under `DIR` this layout lives in.
pub(crate) const LAYOUT: &str = "tfmount-v2";
/// Layouts of earlier versions, removed when a cache is opened.
const OLD_LAYOUTS: &[&str] = &["tfmount-v1"];
/// Pieces per segment file.
pub(crate) const SEGMENT: u64 = 64;
/// Bytes of a segment's header (its slots, then zeros): its pieces start on a page of any size
/// up to 64 KiB, so that they can be mapped in place.
const HEADER: u64 = 64 << 10;
/// Bytes of one piece's slot in a segment's header.
const SLOT: usize = 16;
const MAGIC: &[u8; 4] = b"tfmc";
/// Temporary files older than this, of any process, are left from a crash.
const STALE_TMP: Duration = Duration::from_secs(3600);
/// A segment's time of use is refreshed when it is older than this.
const TOUCH_AFTER: Duration = Duration::from_secs(60);
/// Eviction waits at most this long for another process's eviction.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Counters of one disk cache (for tests, benchmarks and `stats`); [`TOTAL`] sums those of
/// every cache of the process (`tfmount warm`).
#[derive(Debug, Default)]
pub(crate) struct DiskCounters {
    /// Pieces found in the cache (on disk, or just read or written), and the bytes asked for
    /// that they served.
    pub(crate) hits: AtomicU64,
    pub(crate) hit_bytes: AtomicU64,
    /// Pieces written, and their bytes.
    pub(crate) writes: AtomicU64,
    pub(crate) write_bytes: AtomicU64,
    /// Pieces that could not be written (disk full, permissions): served, not kept.
    pub(crate) write_failures: AtomicU64,
    /// Damaged pieces found and removed.
    pub(crate) damaged: AtomicU64,
    /// Pieces removed to stay under `cache_max`.
    pub(crate) evicted: AtomicU64,
    /// Pieces found on disk that this process had not written (there before it, or written
    /// by another process meanwhile), each counted once, and their bytes: what `tfmount warm`
    /// says was already there.
    pub(crate) found: AtomicU64,
    pub(crate) found_bytes: AtomicU64,
}

/// Every disk cache's counters of this process, summed.
pub(crate) static TOTAL: DiskCounters = DiskCounters {
    hits: AtomicU64::new(0),
    hit_bytes: AtomicU64::new(0),
    writes: AtomicU64::new(0),
    write_bytes: AtomicU64::new(0),
    write_failures: AtomicU64::new(0),
    damaged: AtomicU64::new(0),
    evicted: AtomicU64::new(0),
    found: AtomicU64::new(0),
    found_bytes: AtomicU64::new(0),
};

impl DiskCounters {
    fn add(&self, pick: impl Fn(&DiskCounters) -> &AtomicU64, n: u64) {
        pick(self).fetch_add(n, Ordering::Relaxed);
        pick(&TOTAL).fetch_add(n, Ordering::Relaxed);
    }
}

/// What identifies one version of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) url: String,
    pub(crate) size: u64,
    /// `etag=E` (bare) or `modified=T`.
    pub(crate) version: String,
}

impl Identity {
    /// The identity of an object as opened, if it has one a replacement would change: an ETag,
    /// else a modification time.
    pub(crate) fn new(
        url: &str,
        size: u64,
        etag: Option<&str>,
        modified_secs: i64,
    ) -> Option<Identity> {
        let version = match etag {
            Some(e) if !e.is_empty() => format!("etag={e}"),
            _ if modified_secs > 0 => format!("modified={modified_secs}"),
            _ => return None,
        };
        Some(Identity {
            url: url.to_string(),
            size,
            version,
        })
    }

    fn line(&self) -> String {
        format!("size={} {}", self.size, self.version)
    }

    fn record(&self) -> String {
        format!("{}\n{}\n", self.url, self.line())
    }
}

/// One object version's directory in the cache.
#[derive(Debug)]
pub(crate) struct Entry {
    dir: PathBuf,
    id: Identity,
    /// Unique in the process (keys of [`DiskCache::recent`]).
    serial: u64,
}

/// Serials of entries.
static SERIAL: AtomicU64 = AtomicU64::new(1);
/// Pieces kept in memory after they are read or written: reads of neighbouring small tensors
/// (each its own fetch) read a piece from disk and check it once, not once each.
const RECENT: usize = 64;
/// Pieces kept open for reads in place, checked (an open file each).
const OPENED: usize = 64;
/// The buffer a piece is checked through when opened for reads in place.
const CHECK_BUF: usize = 256 << 10;

/// A piece on disk whose CRC-32C was checked when it was opened: reads `pread` its segment's
/// file (which stays readable when the cache removes the segment meanwhile). Nothing of it is
/// held in memory, so a warm read copies each byte once, from the kernel's page cache, as a
/// read of a local file does.
pub(crate) struct OnDisk {
    file: File,
    /// Where the piece starts in the file.
    base: u64,
    len: usize,
}

impl OnDisk {
    /// The piece's length.
    pub(crate) fn size(&self) -> usize {
        self.len
    }

    /// Fills `buf` from byte `at` of the piece; fails on a short read (a file cut since).
    pub(crate) fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if at + buf.len() as u64 > self.len as u64 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        self.file.read_exact_at(buf, self.base + at)
    }

    /// Appends `n` bytes from byte `at` of the piece to `v`; fails on a short read.
    pub(crate) fn append_to(&self, v: &mut Vec<u8>, at: u64, n: usize) -> io::Result<()> {
        if at + n as u64 > self.len as u64
            || !crate::source::file::pread_append(&self.file, v, n, self.base + at)?
        {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        Ok(())
    }
}

/// A piece's slot: its CRC-32C and length, the magic, and a CRC-32C of those 12 bytes.
fn slot(crc: u32, len: u32) -> [u8; SLOT] {
    let mut s = [0u8; SLOT];
    s[..4].copy_from_slice(&crc.to_le_bytes());
    s[4..8].copy_from_slice(&len.to_le_bytes());
    s[8..12].copy_from_slice(MAGIC);
    let check = crc32c::crc32c(&s[..12]);
    s[12..].copy_from_slice(&check.to_le_bytes());
    s
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// What a slot says: `Ok(None)` no piece (zeros), `Ok(Some((crc, len)))` a piece, `Err` why it
/// is neither.
fn parse_slot(s: &[u8]) -> Result<Option<(u32, u32)>, String> {
    if s.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    if s.len() != SLOT || &s[8..12] != MAGIC || crc32c::crc32c(&s[..12]) != le32(&s[12..]) {
        return Err("its slot is damaged".into());
    }
    Ok(Some((le32(&s[..4]), le32(&s[4..8]))))
}

/// What a segment file holds of a piece, its bytes unread.
enum Held {
    /// No slot: never written, or removed.
    Absent,
    /// A slot of the right length over bytes as long: the CRC-32C the slot gives.
    Whole(u32),
    /// Why it cannot be read.
    Damaged(String),
}

/// What segment file `f` holds of piece `n` of `e` (`len` bytes); its bytes are not read.
fn held(f: &File, e: &Entry, n: u64, len: usize) -> Held {
    use std::os::unix::fs::FileExt;
    let mut s = [0u8; SLOT];
    match f.read_exact_at(&mut s, Entry::slot_at(n)) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Held::Absent,
        Err(err) => return Held::Damaged(format!("unreadable: {err}")),
    }
    let crc = match parse_slot(&s) {
        Ok(None) => return Held::Absent,
        Err(why) => return Held::Damaged(why),
        Ok(Some((_, l))) if l as usize != len => {
            return Held::Damaged(format!("its slot says {l} bytes, expected {len}"))
        }
        Ok(Some((crc, _))) => crc,
    };
    let end = e.data_at(n) + len as u64;
    match f.metadata() {
        Err(err) => Held::Damaged(format!("unreadable: {err}")),
        Ok(m) if m.len() < end => Held::Damaged(format!(
            "cut short: {} bytes, the piece ends at {end}",
            m.len()
        )),
        Ok(_) => Held::Whole(crc),
    }
}

/// Whether segment file `f` holds pieces `first..=last` of `e` whole (their slots right, the
/// file long enough; their bytes unchecked); their bytes if so. One read of their slots.
fn whole_run(f: &File, e: &Entry, first: u64, last: u64) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let count = usize::try_from(last.checked_sub(first)? + 1).ok()?;
    if first / SEGMENT != last / SEGMENT {
        return None;
    }
    let mut slots = vec![0u8; count * SLOT];
    f.read_exact_at(&mut slots, Entry::slot_at(first)).ok()?;
    let mut bytes = 0u64;
    for (k, s) in slots.chunks_exact(SLOT).enumerate() {
        let len = e.piece_len(first + k as u64)?;
        match parse_slot(s) {
            Ok(Some((_, l))) if l as usize == len => bytes += len as u64,
            _ => return None,
        }
    }
    let end = e.data_at(first) + bytes;
    f.metadata().is_ok_and(|m| m.len() >= end).then_some(bytes)
}

/// Piece `n` of `e` (`len` bytes) opened, when its segment holds it whole (its CRC unchecked:
/// for the readers that check what they read another way).
fn open_whole(e: &Entry, n: u64, len: usize) -> Option<File> {
    let f = File::open(e.segment_path(n)).ok()?;
    matches!(held(&f, e, n, len), Held::Whole(_)).then_some(f)
}

/// A range of pieces mapped as one, handed out as [`Bytes`] (the mapping lives as long as they
/// do).
struct MappedPiece {
    map: crate::source::mapped::Mapping,
    a: usize,
    b: usize,
}

impl AsRef<[u8]> for MappedPiece {
    fn as_ref(&self) -> &[u8] {
        &self.map.bytes()[self.a..self.b]
    }
}

impl Entry {
    fn piece_len(&self, n: u64) -> Option<usize> {
        let start = n.checked_mul(PIECE)?;
        if start >= self.id.size {
            return None;
        }
        usize::try_from((self.id.size - start).min(PIECE)).ok()
    }

    /// The segment file holding piece `n`.
    fn segment_path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("{}.s", n / SEGMENT))
    }

    /// Where piece `n`'s slot is in its segment file.
    fn slot_at(n: u64) -> u64 {
        (n % SEGMENT) * SLOT as u64
    }

    /// Where piece `n`'s bytes start in its segment file.
    fn data_at(&self, n: u64) -> u64 {
        HEADER + (n % SEGMENT) * PIECE
    }
}

/// Keys kept per SOURCE by [`DiskCache::set_asked`], and the most bytes read back.
pub(crate) const MAX_ASKED: usize = 256;
const MAX_ASKED_BYTES: u64 = 256 << 10;

/// The disk cache of one process over `DIR`.
#[derive(Debug)]
pub(crate) struct DiskCache {
    root: PathBuf,
    objects: PathBuf,
    /// `cache_max` (when not given: set by the first scan).
    max: AtomicU64,
    max_given: bool,
    /// Bytes the cache is believed to hold (from the last scan plus what this process wrote).
    held: AtomicU64,
    /// Whether `held` is known (the first scan runs on a thread).
    scanned: AtomicBool,
    evicting: Mutex<()>,
    tmp_seq: AtomicU64,
    /// The last pieces read or written, by (entry serial, piece).
    recent: Mutex<lru::LruCache<(u64, u64), Bytes>>,
    /// Pieces opened and checked for reads in place ([`DiskCache::open_checked`]).
    opened: Mutex<lru::LruCache<(u64, u64), Arc<OnDisk>>>,
    /// The writer thread's queue (made by the first [`DiskCache::put_behind`]). Each item
    /// holds the cache it is for: a cache whose store is dropped with pieces still queued (the
    /// end of `tfmount warm`, an unmount) lives on until the writer has written them, and
    /// [`flush_all`] finds it meanwhile. The thread ends when the last sender (this one) goes.
    writer: std::sync::OnceLock<Option<std::sync::mpsc::SyncSender<Job>>>,
    pub(crate) counters: DiskCounters,
    /// The pieces this cache wrote or counted as found (`DiskCounters::found`), by (entry
    /// serial, piece): 16 bytes per MiB handled, so that a piece is counted once whichever way
    /// it is read again.
    accounted: Mutex<std::collections::HashSet<(u64, u64)>>,
}

/// What the writer thread is given.
pub(crate) enum Queued {
    Piece(Arc<Entry>, u64, Bytes),
    /// Answered once everything queued before it is written.
    Flush(std::sync::mpsc::Sender<()>),
}

/// An item of the writer thread's queue, with the cache it is for.
type Job = (Arc<DiskCache>, Queued);

/// Pieces queued for the writer thread at most (memory beyond `remote_cache`: 1 MiB each).
const QUEUED: usize = 32;

/// Every cache of the process, for [`flush_all`].
static CACHES: Mutex<Vec<std::sync::Weak<DiskCache>>> = Mutex::new(Vec::new());

/// Waits (at most `limit` each) until every cache of the process has written what it queued:
/// before the process ends (an unmount, the end of a subcommand), or before `warm` counts what
/// it kept. Caches whose store is gone are flushed too while pieces of theirs are queued (the
/// queued pieces hold them). `false` if a cache still had pieces to write after `limit`.
pub(crate) fn flush_all(limit: Duration) -> bool {
    let caches: Vec<Arc<DiskCache>> = lock(&CACHES)
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    let mut all = true;
    for c in caches {
        all &= c.flush(limit);
    }
    all
}

/// 64-bit FNV-1a (names directories; collisions are detected by the `object` file).
fn fnv(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

fn io_err(path: &Path, e: io::Error) -> String {
    format!("{}: {e}", path.display())
}

/// Free bytes of the file system holding `dir`.
fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path; `st` is written by statvfs on success only.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
    // The field types vary between platforms (u32 on some 32-bit ones).
    #[allow(clippy::useless_conversion)]
    let free = || u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize));
    (r == 0).then(free)
}

/// An exclusive `flock` on `path`, waited for at most [`LOCK_WAIT`].
struct Lock(File);

impl Lock {
    fn take(path: &Path) -> io::Result<Lock> {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        let until = std::time::Instant::now() + LOCK_WAIT;
        loop {
            // SAFETY: flock on a descriptor we own.
            let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if r == 0 {
                return Ok(Lock(f));
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(e);
            }
            if std::time::Instant::now() >= until {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("held by another process for {LOCK_WAIT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor we own.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// One segment file found by a scan.
struct Found {
    path: PathBuf,
    /// Bytes of the pieces it holds, and how many.
    bytes: u64,
    pieces: u64,
    used: SystemTime,
}

/// One cached object version, as `tfmount cache ls` shows it.
#[derive(Debug, Clone)]
pub(crate) struct CachedObject {
    pub(crate) url: String,
    /// `size=N etag=E` or `size=N modified=T`.
    pub(crate) identity: String,
    pub(crate) size: u64,
    pub(crate) pieces: u64,
    /// Bytes of its pieces on disk.
    pub(crate) bytes: u64,
    pub(crate) last_used: Option<SystemTime>,
}

impl DiskCache {
    /// Opens (creating it) the cache in `dir`, bounded by `max` bytes (default: half the free
    /// space plus what it holds). The directory is scanned on a thread (stale temporary files
    /// removed, the bytes held counted, pieces evicted if over `max`). Errors name the directory.
    pub(crate) fn open(dir: &Path, max: Option<u64>) -> Result<Arc<DiskCache>, String> {
        let (root, objects) = Self::usable(dir)?;
        let cache = Arc::new(DiskCache {
            root,
            objects,
            max: AtomicU64::new(max.unwrap_or(u64::MAX)),
            max_given: max.is_some(),
            held: AtomicU64::new(0),
            scanned: AtomicBool::new(false),
            evicting: Mutex::new(()),
            tmp_seq: AtomicU64::new(0),
            recent: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(RECENT).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            opened: Mutex::new(lru::LruCache::new(
                std::num::NonZeroUsize::new(OPENED).unwrap_or(std::num::NonZeroUsize::MIN),
            )),
            writer: std::sync::OnceLock::new(),
            counters: DiskCounters::default(),
            accounted: Mutex::new(std::collections::HashSet::new()),
        });
        {
            let mut all = lock(&CACHES);
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&cache));
        }
        let c = Arc::clone(&cache);
        let spawned = std::thread::Builder::new()
            .name("tfmount-cache-scan".into())
            .spawn(move || {
                drop_old_layouts(&c.root);
                c.evict(false)
            });
        if spawned.is_err() {
            drop_old_layouts(&cache.root);
            cache.evict(false);
        }
        Ok(cache)
    }

    /// Whether a cache can live in `dir`: its layout's directories made and its lock file
    /// writable (no scan, nothing else opened); the layout's root and `objects/` directory.
    pub(crate) fn usable(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
        let root = dir.join(LAYOUT);
        let objects = root.join("objects");
        fs::create_dir_all(&objects).map_err(|e| io_err(&objects, e))?;
        let probe = root.join("lock");
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&probe)
            .map_err(|e| format!("{}: not writable: {e}", dir.display()))?;
        Ok((root, objects))
    }

    /// `cache_max`.
    pub(crate) fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// Bytes held, as this process believes (exact after a scan).
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The directory the cache lives in (`DIR/tfmount-v1`).
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// The keys a mount of `source` (a SOURCE's URL) last asked about beyond its first probes
    /// (its data shards and `.meta`, on a store that cannot list: see
    /// [`set_asked`](Self::set_asked)), so that the next mount asks at once; empty if none are
    /// kept. At most [`MAX_ASKED`] keys.
    pub(crate) fn asked(&self, source: &str) -> Vec<String> {
        let Ok(f) = File::open(self.asked_path(source)) else {
            return Vec::new();
        };
        let mut text = String::new();
        if f.take(MAX_ASKED_BYTES).read_to_string(&mut text).is_err() {
            return Vec::new();
        }
        let mut lines = text.lines();
        // A hash collision names another SOURCE on its first line.
        if lines.next() != Some(source) {
            return Vec::new();
        }
        lines.take(MAX_ASKED).map(str::to_string).collect()
    }

    /// Keeps `keys` as what a mount of `source` asked about beyond its first probes (see
    /// [`asked`](Self::asked)); at most [`MAX_ASKED`], the rest dropped. A failure to write is
    /// not an error (the next mount asks one round later, as without the note).
    pub(crate) fn set_asked(&self, source: &str, keys: &[String]) {
        let dir = self.root.join("asked");
        let mut text = format!("{source}\n");
        for k in keys.iter().take(MAX_ASKED) {
            if !k.contains('\n') {
                text.push_str(k);
                text.push('\n');
            }
        }
        let r = fs::create_dir_all(&dir)
            .and_then(|()| self.write_atomic(&dir, &fnv(source), &[text.as_bytes()]));
        if let Err(e) = r {
            log::debug!(
                "{}: cannot keep what {source} asked about: {e}",
                dir.display()
            );
        }
    }

    fn asked_path(&self, source: &str) -> PathBuf {
        self.root.join("asked").join(fnv(source))
    }

    /// Whether some version of the object at `url` is cached (its directory holds one): a
    /// mount then asks whether it is still that version before reading it (a HEAD), where an
    /// object never cached is fetched at once.
    pub(crate) fn knows(&self, url: &str) -> bool {
        fs::read_dir(self.objects.join(fnv(url))).is_ok_and(|mut d| d.next().is_some())
    }

    /// The entry of an object version, made if missing; older versions of its URL are removed.
    /// `None` when it cannot be used (a hash collision, an unwritable directory: then the object
    /// is read without the cache).
    pub(crate) fn entry(&self, id: &Identity) -> Option<Arc<Entry>> {
        let url_dir = self.objects.join(fnv(&id.url));
        let dir = url_dir.join(fnv(&id.line()));
        let record = dir.join("object");
        match fs::read_to_string(&record) {
            Ok(text) if text == id.record() => {}
            Ok(_) => {
                log::debug!("{}: cache directory in use by another object", id.url);
                return None;
            }
            Err(_) => {
                self.drop_other_versions(&url_dir, id);
                if let Err(e) = self.make_entry(&dir, id) {
                    log::warn!(
                        "{}: cannot cache {}: {e}; reading without the cache",
                        self.root.display(),
                        id.url
                    );
                    return None;
                }
            }
        }
        Some(Arc::new(Entry {
            dir,
            id: id.clone(),
            serial: SERIAL.fetch_add(1, Ordering::Relaxed),
        }))
    }

    fn make_entry(&self, dir: &Path, id: &Identity) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        self.write_atomic(dir, "object", &[id.record().as_bytes()])
    }

    /// Removes the directories of other versions of `id.url`.
    fn drop_other_versions(&self, url_dir: &Path, id: &Identity) {
        let Ok(rd) = fs::read_dir(url_dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(text) = fs::read_to_string(p.join("object")) else {
                continue;
            };
            if text.lines().next() == Some(id.url.as_str()) && text != id.record() {
                let bytes: u64 = scan_dir(&p).iter().map(|f| f.bytes).sum();
                if fs::remove_dir_all(&p).is_ok() {
                    log::info!(
                        "{}: changed since it was cached ({} -> {}); {bytes} cached bytes of the old version removed",
                        id.url,
                        text.lines().nth(1).unwrap_or(""),
                        id.line()
                    );
                    let _ = self
                        .held
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
                            Some(h.saturating_sub(bytes))
                        });
                }
            }
        }
    }

    /// Writes `parts` to a temporary file in `dir` and renames it to `name`.
    fn write_atomic(&self, dir: &Path, name: &str, parts: &[&[u8]]) -> io::Result<()> {
        let tmp = dir.join(format!(
            ".tmp-{}-{}",
            std::process::id(),
            self.tmp_seq.fetch_add(1, Ordering::Relaxed)
        ));
        let r = (|| {
            let mut f = File::create(&tmp)?;
            for p in parts {
                f.write_all(p)?;
            }
            fs::rename(&tmp, dir.join(name))
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    /// Whether piece `n` of `e` is cached (in memory, or on disk with a slot of the right
    /// length; its bytes not checked: [`get`](Self::get) checks).
    pub(crate) fn has(&self, e: &Entry, n: u64) -> bool {
        let Some(len) = e.piece_len(n) else {
            return false;
        };
        self.recent().contains(&(e.serial, n)) || open_whole(e, n, len).is_some()
    }

    /// Piece `n` of `e` if it is among the pieces kept in memory (no disk access: cheap enough
    /// to ask under a lock).
    pub(crate) fn peek(&self, e: &Entry, n: u64) -> Option<Bytes> {
        let b = self.recent().get(&(e.serial, n)).cloned()?;
        self.counters.add(|c| &c.hits, 1);
        Some(b)
    }

    /// Piece `n` of `e` opened for reads in place ([`OnDisk`]), its CRC-32C checked (once per
    /// opening); `None` if it is not on disk (a damaged one is removed, as by [`get`](Self::get)).
    pub(crate) fn open_checked(&self, e: &Entry, n: u64) -> Option<Arc<OnDisk>> {
        let len = e.piece_len(n)?;
        let key = (e.serial, n);
        if let Some(p) = self.lock_opened().get(&key) {
            return Some(Arc::clone(p));
        }
        let f = File::open(e.segment_path(n)).ok()?;
        match check_piece(&f, e, n, len) {
            Ok(true) => {}
            Ok(false) => return None,
            Err(why) => {
                self.damaged(e, n, &why);
                return None;
            }
        }
        touch(&f);
        self.found(e, n, len);
        let p = Arc::new(OnDisk {
            file: f,
            base: e.data_at(n),
            len,
        });
        self.lock_opened().put(key, Arc::clone(&p));
        Some(p)
    }

    /// Appends bytes `[at, at + n)` of piece `n` of `e` to `v`, **unchecked** (its CRC-32C is
    /// not computed: for a caller that checks what it read another way, a tensor's CRC);
    /// `false` if the piece is not on disk whole.
    pub(crate) fn read_unchecked(
        &self,
        e: &Entry,
        piece: u64,
        at: u64,
        n: usize,
        v: &mut Vec<u8>,
    ) -> bool {
        let Some(len) = e.piece_len(piece) else {
            return false;
        };
        if at + n as u64 > len as u64 {
            return false;
        }
        if let Some(p) = self.lock_opened().get(&(e.serial, piece)).cloned() {
            return p.append_to(v, at, n).is_ok();
        }
        let Some(f) = open_whole(e, piece, len) else {
            return false;
        };
        let read =
            crate::source::file::pread_append(&f, v, n, e.data_at(piece) + at).unwrap_or(false);
        if read {
            self.found(e, piece, len);
        }
        read
    }

    /// Bytes `range` of the object of `e` as one slice of its pieces mapped one after the other
    /// ([`Mapping::concat`](crate::source::mapped::Mapping::concat): each segment's run of them
    /// in place), **unchecked** (as [`read_unchecked`](Self::read_unchecked)), when mapped reads
    /// are allowed on this thread ([`crate::source::mapped::allowed`]: a FUSE reply's read in the
    /// daemon, whose guard turns a page lost to a file cut short into EIO); `None` otherwise, or
    /// when a piece is not on disk whole. Replies are then written to the kernel from the
    /// pieces' pages, as from a local file's: no copy into memory first, none where a read
    /// spans two pieces or two segments.
    pub(crate) fn map_unchecked(&self, e: &Entry, range: std::ops::Range<u64>) -> Option<Bytes> {
        if !crate::source::mapped::allowed() || range.is_empty() {
            return None;
        }
        let (first, last) = (range.start / PIECE, (range.end - 1) / PIECE);
        let mut runs = Vec::new();
        let mut n = first;
        while n <= last {
            let upto = last.min((n / SEGMENT + 1) * SEGMENT - 1);
            let f = File::open(e.segment_path(n)).ok()?;
            let bytes = whole_run(&f, e, n, upto)?;
            runs.push((f, e.data_at(n), bytes));
            n = upto + 1;
        }
        let parts: Vec<(&File, u64, u64)> = runs.iter().map(|(f, a, l)| (f, *a, *l)).collect();
        let map = crate::source::mapped::Mapping::concat(&parts)?;
        if (map.bytes().len() as u64) < range.end - first * PIECE {
            return None;
        }
        for n in first..=last {
            self.found(e, n, e.piece_len(n)?);
        }
        let a = (range.start - first * PIECE) as usize;
        Some(Bytes::from_owner(MappedPiece {
            map,
            a,
            b: a + (range.end - range.start) as usize,
        }))
    }

    /// Records piece `n` of `e` as handled by this cache (written, or counted as found);
    /// whether it was not before.
    fn account(&self, e: &Entry, n: u64) -> bool {
        lock(&self.accounted).insert((e.serial, n))
    }

    /// Counts piece `n` of `e` (`len` bytes), just read from disk, as found there, unless this
    /// cache wrote it or counted it before.
    fn found(&self, e: &Entry, n: u64, len: usize) {
        if self.account(e, n) {
            self.counters.add(|c| &c.found, 1);
            self.counters.add(|c| &c.found_bytes, len as u64);
        }
    }

    /// Removes piece `n` of `e` (its bytes proved wrong another way); logged by the caller.
    pub(crate) fn remove(&self, e: &Entry, n: u64) {
        self.close(e, n);
        self.recent().pop(&(e.serial, n));
        clear_piece(e, n);
    }

    /// Whether piece `n` of `e` is open for reads in place.
    pub(crate) fn is_open(&self, e: &Entry, n: u64) -> bool {
        self.lock_opened().contains(&(e.serial, n))
    }

    /// Closes piece `n` of `e` if it is open for reads in place (a read of it failed).
    pub(crate) fn close(&self, e: &Entry, n: u64) {
        self.lock_opened().pop(&(e.serial, n));
    }

    /// Counts, logs and removes piece `n` of `e`, found damaged (`why`).
    fn damaged(&self, e: &Entry, n: u64, why: &str) {
        self.counters.add(|c| &c.damaged, 1);
        log::warn!(
            "{}: damaged cache file {}, piece {n} ({why}): removed, fetched again",
            e.id.url,
            e.segment_path(n).display()
        );
        self.close(e, n);
        clear_piece(e, n);
    }

    fn lock_opened(&self) -> std::sync::MutexGuard<'_, lru::LruCache<(u64, u64), Arc<OnDisk>>> {
        lock(&self.opened)
    }

    /// Piece `n` of `e`, checked; `None` if it is not cached (a damaged one is removed).
    pub(crate) fn get(&self, e: &Entry, n: u64) -> Option<Bytes> {
        let len = e.piece_len(n)?;
        if let Some(b) = self.recent().get(&(e.serial, n)) {
            self.counters.add(|c| &c.hits, 1);
            return Some(b.clone());
        }
        let f = File::open(e.segment_path(n)).ok()?;
        let bad = match held(&f, e, n, len) {
            Held::Absent => return None,
            Held::Damaged(why) => Some(why),
            Held::Whole(crc) => {
                // Room for what a piece holds: reading it never grows the buffer.
                let mut buf = Vec::with_capacity(len);
                match crate::source::file::pread_append(&f, &mut buf, len, e.data_at(n)) {
                    Err(err) => Some(format!("unreadable: {err}")),
                    Ok(false) => Some("cut short".into()),
                    Ok(true) if crc32c::crc32c(&buf) != crc => Some("CRC-32C mismatch".into()),
                    Ok(true) => {
                        touch(&f);
                        self.counters.add(|c| &c.hits, 1);
                        self.found(e, n, len);
                        let b = Bytes::from(buf);
                        self.recent().put((e.serial, n), b.clone());
                        return Some(b);
                    }
                }
            }
        };
        if let Some(why) = bad {
            self.damaged(e, n, &why);
        }
        None
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, lru::LruCache<(u64, u64), Bytes>> {
        lock(&self.recent)
    }

    /// Counts `n` bytes asked for and served from cached pieces.
    pub(crate) fn served(&self, n: u64) {
        self.counters.add(|c| &c.hit_bytes, n);
    }

    /// Keeps piece `n` of `e` as [`put`](Self::put) does, on the cache's writer thread: the
    /// piece is served from memory ([`RECENT`]) at once, and written behind. `Err` gives the
    /// piece back when the queue is full ([`QUEUED`]): then [`queue`](Self::queue) it, which
    /// waits.
    pub(crate) fn put_behind(
        self: &Arc<Self>,
        e: &Arc<Entry>,
        n: u64,
        data: Bytes,
    ) -> Result<(), Queued> {
        if e.piece_len(n) != Some(data.len()) {
            return Ok(());
        }
        self.recent().put((e.serial, n), data.clone());
        let item = Queued::Piece(Arc::clone(e), n, data);
        match self.writer() {
            Some(tx) => match tx.try_send((Arc::clone(self), item)) {
                Ok(()) => Ok(()),
                Err(std::sync::mpsc::TrySendError::Full((_, item))) => Err(item),
                Err(std::sync::mpsc::TrySendError::Disconnected((_, item))) => {
                    self.write_now(item);
                    Ok(())
                }
            },
            None => {
                self.write_now(item);
                Ok(())
            }
        }
    }

    /// Queues `item` for the writer thread, waiting for room.
    pub(crate) fn queue(self: &Arc<Self>, item: Queued) {
        match self.writer() {
            Some(tx) => {
                if let Err(e) = tx.send((Arc::clone(self), item)) {
                    self.write_now(e.0 .1);
                }
            }
            None => self.write_now(item),
        }
    }

    fn write_now(&self, item: Queued) {
        match item {
            Queued::Piece(e, n, data) => self.put(&e, n, &data),
            Queued::Flush(done) => {
                let _ = done.send(());
            }
        }
    }

    /// The writer thread's queue, started by the first call (`None` if no thread can start).
    fn writer(self: &Arc<Self>) -> Option<&std::sync::mpsc::SyncSender<Job>> {
        self.writer
            .get_or_init(|| {
                let (tx, rx) = std::sync::mpsc::sync_channel::<Job>(QUEUED);
                std::thread::Builder::new()
                    .name("tfmount-cache-write".into())
                    .spawn(move || {
                        // Every item queued is written (its cache held by the item, not looked
                        // up through a weak reference that may be gone by then: pieces queued
                        // as the store was dropped were lost, and `warm` exited 0 without
                        // them). Ends when the cache, which holds the sender, is dropped: after
                        // its last item, as no item is left to hold it.
                        while let Ok((c, item)) = rx.recv() {
                            c.write_now(item);
                        }
                    })
                    .ok()
                    .map(|_| tx)
            })
            .as_ref()
    }

    /// Waits until what was queued before is written (at most `limit`); `false` if it was not
    /// by then.
    pub(crate) fn flush(self: &Arc<Self>, limit: Duration) -> bool {
        if self.writer.get().is_none() {
            return true;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        self.queue(Queued::Flush(tx));
        if rx.recv_timeout(limit).is_err() {
            log::warn!(
                "{}: pieces still being written after {limit:?}; the next mount fetches them again",
                self.root.display()
            );
            return false;
        }
        true
    }

    /// Keeps piece `n` of `e` (exactly its bytes; anything else is ignored). Failures are
    /// counted and logged, never returned: the bytes were served anyway.
    pub(crate) fn put(&self, e: &Entry, n: u64, data: &Bytes) {
        if e.piece_len(n) != Some(data.len()) {
            return;
        }
        self.recent().put((e.serial, n), data.clone());
        // Before it is on disk: a read of it from there is not a piece found.
        self.account(e, n);
        let crc = crc32c::crc32c(data);
        let mut r = write_piece(e, n, data, crc);
        if r.as_ref()
            .is_err_and(|err| err.kind() == io::ErrorKind::NotFound)
        {
            // Evicted meanwhile (by this or another process): made again.
            r = self
                .make_entry(&e.dir, &e.id)
                .and_then(|()| write_piece(e, n, data, crc));
        }
        if let Err(err) = r {
            if self.counters.write_failures.load(Ordering::Relaxed) == 0 {
                log::warn!(
                    "{}: cannot write to the cache: {err} (pieces are served, not kept; said once)",
                    self.root.display()
                );
            }
            self.counters.add(|c| &c.write_failures, 1);
            return;
        }
        let n = data.len() as u64;
        self.counters.add(|c| &c.writes, 1);
        self.counters.add(|c| &c.write_bytes, data.len() as u64);
        let held = self.held.fetch_add(n, Ordering::Relaxed) + n;
        if held > self.max() && self.scanned.load(Ordering::Relaxed) {
            self.evict(true);
        }
    }

    /// Scans the cache (under its lock): removes stale temporary files, counts what it holds,
    /// and, if that is over `max` (or `force` and over 90% of it), removes the least recently
    /// used segments until it holds 90% of `max`.
    fn evict(&self, force: bool) {
        let Ok(_one) = self.evicting.try_lock() else {
            return;
        };
        let _lock = match Lock::take(&self.root.join("lock")) {
            Ok(l) => l,
            Err(e) => {
                log::warn!("{}: cannot take the cache lock: {e}", self.root.display());
                self.scanned.store(true, Ordering::Relaxed);
                return;
            }
        };
        let mut found = scan(&self.objects);
        let mut held: u64 = found.iter().map(|f| f.bytes).sum();
        if !self.max_given && !self.scanned.load(Ordering::Relaxed) {
            let max = (free_space(&self.root).unwrap_or(0) / 2).saturating_add(held);
            self.max.store(max, Ordering::Relaxed);
        }
        let max = self.max();
        let target = max / 10 * 9;
        if held > max || (force && held > target) {
            found.sort_by_key(|f| f.used);
            for f in &found {
                if held <= target {
                    break;
                }
                if held - f.bytes.min(held) >= target {
                    if fs::remove_file(&f.path).is_ok() {
                        held -= f.bytes.min(held);
                        self.counters.add(|c| &c.evicted, f.pieces);
                    }
                } else {
                    // Of the last segment, only as many pieces as are needed, first ones first
                    // (a sequential reader read them first).
                    let (n, bytes) = shrink_segment(&f.path, held - target);
                    held -= bytes.min(held);
                    self.counters.add(|c| &c.evicted, n);
                }
            }
            log::info!(
                "{}: cache over {} bytes: least recently used pieces removed, {held} bytes held",
                self.root.display(),
                max
            );
        }
        self.held.store(held, Ordering::Relaxed);
        self.scanned.store(true, Ordering::Relaxed);
    }
}

/// Marks a segment file used now (for eviction, least recently used first), at most once a
/// [`TOUCH_AFTER`].
fn touch(f: &File) {
    if let Ok(m) = f.metadata().and_then(|m| m.modified()) {
        if m.elapsed().is_ok_and(|age| age > TOUCH_AFTER) {
            let _ = f.set_modified(SystemTime::now());
        }
    }
}

/// Whether segment file `f` holds piece `n` of `e` (`len` bytes) whole and right, its bytes
/// read through a small buffer and checked against the CRC-32C of its slot: `Ok(false)` if it
/// is not there, `Err` what is wrong with it.
fn check_piece(f: &File, e: &Entry, n: u64, len: usize) -> Result<bool, String> {
    let want = match held(f, e, n, len) {
        Held::Absent => return Ok(false),
        Held::Damaged(why) => return Err(why),
        Held::Whole(crc) => crc,
    };
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let base = e.data_at(n);
    let crc = BUF.with(|b| {
        let mut buf = b.borrow_mut();
        let mut crc = 0u32;
        let mut at = 0usize;
        while at < len {
            let k = (len - at).min(CHECK_BUF);
            buf.clear();
            match crate::source::file::pread_append(f, &mut buf, k, base + at as u64) {
                Ok(true) => {}
                Ok(false) => return Err("cut short".to_string()),
                Err(err) => return Err(format!("unreadable: {err}")),
            }
            crc = crc32c::crc32c_append(crc, &buf);
            at += k;
        }
        Ok(crc)
    })?;
    if crc != want {
        return Err("CRC-32C mismatch".into());
    }
    Ok(true)
}

/// Writes piece `n` of `e` into its segment file (made if missing; its directory not): its
/// bytes, then its slot.
fn write_piece(e: &Entry, n: u64, data: &[u8], crc: u32) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let len = u32::try_from(data.len()).map_err(|_| io::Error::other("piece too long"))?;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(e.segment_path(n))?;
    f.write_all_at(data, e.data_at(n))?;
    f.write_all_at(&slot(crc, len), Entry::slot_at(n))
}

/// Removes piece `n` of `e` from its segment file: its slot zeroed, so that it is not there
/// (its bytes are left in place, rewritten when it is fetched again: a reader that checked them
/// before, in this process or another, is not handed zeros).
fn clear_piece(e: &Entry, n: u64) {
    use std::os::unix::fs::FileExt;
    if let Ok(f) = fs::OpenOptions::new().write(true).open(e.segment_path(n)) {
        let _ = f.write_all_at(&[0u8; SLOT], Entry::slot_at(n));
    }
}

/// Removes the first pieces segment file `path` holds until `bytes` of them are gone (or all);
/// the pieces and bytes removed. The pieces kept are copied to a new file renamed over it, not
/// cut out in place: a reader that opened the segment before (another process, a piece open for
/// reads in place) keeps reading the bytes it checked, as from a segment removed whole.
fn shrink_segment(path: &Path, bytes: u64) -> (u64, u64) {
    use std::os::unix::fs::FileExt;
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let Ok(f) = File::open(path) else {
        return (0, 0);
    };
    let mut slots = vec![0u8; SEGMENT as usize * SLOT];
    let got = f.read_at(&mut slots, 0).unwrap_or(0);
    let (mut n, mut gone) = (0, 0);
    let mut keep = Vec::new();
    for (i, s) in slots[..got - got % SLOT].chunks_exact(SLOT).enumerate() {
        if let Ok(Some((_, len))) = parse_slot(s) {
            if gone < bytes {
                n += 1;
                gone += u64::from(len);
            } else {
                keep.push((i, u64::from(len)));
            }
        }
    }
    if keep.is_empty() {
        return if fs::remove_file(path).is_ok() {
            (n, gone)
        } else {
            (0, 0)
        };
    }
    let Some(dir) = path.parent() else {
        return (0, 0);
    };
    let tmp = dir.join(format!(
        ".tmp-{}-e{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    let copied = (|| -> io::Result<()> {
        let out = File::create(&tmp)?;
        let mut buf = Vec::new();
        for &(i, len) in &keep {
            let at = HEADER + i as u64 * PIECE;
            buf.clear();
            if !crate::source::file::pread_append(&f, &mut buf, len as usize, at)? {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            out.write_all_at(&buf, at)?;
            out.write_all_at(&slots[i * SLOT..(i + 1) * SLOT], (i * SLOT) as u64)?;
        }
        fs::rename(&tmp, path)
    })();
    if copied.is_err() {
        let _ = fs::remove_file(&tmp);
        return (0, 0);
    }
    (n, gone)
}

/// Removes the caches of earlier layouts beside `root` (`DIR/tfmount-v1` beside
/// `DIR/tfmount-v2`), under their own lock: what they hold is never read again.
fn drop_old_layouts(root: &Path) {
    let Some(dir) = root.parent() else {
        return;
    };
    for name in OLD_LAYOUTS {
        let old = dir.join(name);
        if !old.join("objects").is_dir() {
            continue;
        }
        let Ok(_lock) = Lock::take(&old.join("lock")) else {
            continue;
        };
        match fs::remove_dir_all(&old) {
            Ok(()) => log::info!(
                "{}: the cache of an earlier version of tfmount removed (now kept in {LAYOUT}/)",
                old.display()
            ),
            Err(e) => log::warn!("{}: cannot remove an old cache: {e}", old.display()),
        }
    }
}

/// Every segment under `objects` (stale temporary files are removed on the way).
fn scan(objects: &Path) -> Vec<Found> {
    versions(objects)
        .unwrap_or_default()
        .iter()
        .flat_map(|v| scan_dir(v))
        .collect()
}

/// The pieces of one object version's directory.
fn scan_dir(dir: &Path) -> Vec<Found> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Ok(m) = e.metadata() else { continue };
        let used = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if name.starts_with(".tmp-") {
            if used.elapsed().is_ok_and(|age| age > STALE_TMP) {
                let _ = fs::remove_file(e.path());
            }
            continue;
        }
        if name.ends_with(".s") {
            let (pieces, bytes) = File::open(e.path()).map_or((0, 0), |f| slots_held(&f));
            out.push(Found {
                path: e.path(),
                bytes,
                pieces,
                used,
            });
        }
    }
    out
}

/// The pieces segment file `f` has slots for, and their bytes (one read of its slots).
fn slots_held(f: &File) -> (u64, u64) {
    use std::os::unix::fs::FileExt;
    let mut slots = vec![0u8; SEGMENT as usize * SLOT];
    let mut got = 0;
    while got < slots.len() {
        match f.read_at(&mut slots[got..], got as u64) {
            Ok(0) | Err(_) => break,
            Ok(k) => got += k,
        }
    }
    slots[..got - got % SLOT]
        .chunks_exact(SLOT)
        .filter_map(|s| parse_slot(s).ok().flatten())
        .fold((0, 0), |(n, b), (_, len)| (n + 1, b + u64::from(len)))
}

/// Every piece held under `dir` (a cache's directory, or any directory below it): its segment
/// file and where its bytes are in it, in no particular order (for tests that damage them).
#[cfg(test)]
pub(crate) fn held_pieces(dir: &Path) -> Vec<(PathBuf, std::ops::Range<u64>)> {
    use std::os::unix::fs::FileExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let segment = p
                .file_name()
                .and_then(|n| n.to_str()?.strip_suffix(".s"))
                .is_some_and(|k| k.parse::<u64>().is_ok());
            if !segment {
                continue;
            }
            let Ok(f) = File::open(&p) else { continue };
            let mut slots = vec![0u8; SEGMENT as usize * SLOT];
            let _ = f.read_at(&mut slots, 0);
            for (i, s) in slots.chunks_exact(SLOT).enumerate() {
                if let Ok(Some((_, len))) = parse_slot(s) {
                    let at = HEADER + i as u64 * PIECE;
                    out.push((p.clone(), at..at + u64::from(len)));
                }
            }
        }
    }
    out
}

/// The object version directories under `objects` (`objects/<U>/<I>`).
fn versions(objects: &Path) -> Result<Vec<PathBuf>, String> {
    let urls = fs::read_dir(objects).map_err(|e| io_err(objects, e))?;
    let mut out = Vec::new();
    for u in urls.flatten() {
        if let Ok(vs) = fs::read_dir(u.path()) {
            out.extend(vs.flatten().map(|v| v.path()));
        }
    }
    Ok(out)
}

/// `dir/tfmount-v1`, if `dir` holds a cache.
fn root_of(dir: &Path) -> Result<PathBuf, String> {
    let root = dir.join(LAYOUT);
    if root.is_dir() {
        Ok(root)
    } else {
        Err(format!(
            "{}: not a tfmount cache (no {LAYOUT}/)",
            dir.display()
        ))
    }
}

/// What the cache in `dir` holds, one entry per object version, largest first.
pub(crate) fn list(dir: &Path) -> Result<Vec<CachedObject>, String> {
    let objects = root_of(dir)?.join("objects");
    let mut out = Vec::new();
    for p in versions(&objects)? {
        let Ok(text) = fs::read_to_string(p.join("object")) else {
            continue;
        };
        let mut lines = text.lines();
        let url = lines.next().unwrap_or("").to_string();
        let identity = lines.next().unwrap_or("").to_string();
        let size = identity
            .split_whitespace()
            .find_map(|w| w.strip_prefix("size="))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let segments = scan_dir(&p);
        out.push(CachedObject {
            url,
            identity,
            size,
            pieces: segments.iter().map(|f| f.pieces).sum(),
            bytes: segments.iter().map(|f| f.bytes).sum(),
            last_used: segments.iter().map(|f| f.used).max(),
        });
    }
    out.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.url.cmp(&b.url)));
    Ok(out)
}

/// Removes every cached object whose URL starts with `prefix` (all with `None`), under the
/// cache's lock; returns the object versions and bytes removed.
pub(crate) fn clear(dir: &Path, prefix: Option<&str>) -> Result<(u64, u64), String> {
    let root = root_of(dir)?;
    let _lock = Lock::take(&root.join("lock")).map_err(|e| io_err(&root.join("lock"), e))?;
    let (mut n, mut bytes) = (0, 0);
    for p in versions(&root.join("objects"))? {
        let url = fs::read_to_string(p.join("object")).unwrap_or_default();
        let url = url.lines().next().unwrap_or("");
        if prefix.is_some_and(|pre| !url.starts_with(pre)) {
            continue;
        }
        let b: u64 = scan_dir(&p).iter().map(|f| f.bytes).sum();
        fs::remove_dir_all(&p).map_err(|e| io_err(&p, e))?;
        n += 1;
        bytes += b;
        if let Some(parent) = p.parent() {
            // Gone once its last version is.
            let _ = fs::remove_dir(parent);
        }
    }
    Ok((n, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(url: &str, size: u64, etag: &str) -> Identity {
        Identity::new(url, size, Some(etag), 0).unwrap()
    }

    fn open(dir: &Path, max: u64) -> Arc<DiskCache> {
        let c = DiskCache::open(dir, Some(max)).unwrap();
        // Wait for the first scan.
        while !c.scanned.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        c
    }

    fn piece(n: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 31 + n * 7) as u8).collect()
    }

    #[test]
    fn pieces_come_back_across_opens_and_processes_share_them() {
        let d = tempfile::tempdir().unwrap();
        let size = 2 * PIECE + 5;
        let a = open(d.path(), 1 << 30);
        let e = a.entry(&id("s3://b/k", size, "e1")).unwrap();
        assert!(a.get(&e, 0).is_none());
        a.put(&e, 0, &piece(0, PIECE as usize).into());
        a.put(&e, 2, &piece(2, 5).into());
        // A wrong length is not kept.
        a.put(&e, 1, &piece(1, 10).into());
        assert_eq!(a.get(&e, 0).unwrap(), piece(0, PIECE as usize));
        assert_eq!(a.get(&e, 2).unwrap(), piece(2, 5));
        assert!(a.get(&e, 1).is_none() && a.get(&e, 3).is_none());
        // Another cache over the same directory (another process, a later mount) sees them.
        let b = open(d.path(), 1 << 30);
        assert_eq!(b.held(), PIECE + 5);
        let e2 = b.entry(&id("s3://b/k", size, "e1")).unwrap();
        assert_eq!(b.get(&e2, 0).unwrap(), piece(0, PIECE as usize));
        let l = list(d.path()).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!((l[0].pieces, l[0].bytes, l[0].size), (2, PIECE + 5, size));
        assert_eq!(l[0].url, "s3://b/k");
    }

    /// The end of `tfmount warm`: its store (the last holder of the cache) is dropped with
    /// pieces still queued for the writer thread. They are written all the same, and a flush
    /// through the process's list of caches waits for them (they used to be dropped: the
    /// thread looked the cache up through a weak reference, gone by then).
    #[test]
    fn pieces_queued_when_the_cache_is_dropped_are_written() {
        let d = tempfile::tempdir().unwrap();
        let n = 40u64;
        let c = open(d.path(), 1 << 30);
        let e = c.entry(&id("s3://b/queued", n * PIECE, "e1")).unwrap();
        for k in 0..n {
            if let Err(item) = c.put_behind(&e, k, piece(k, PIECE as usize).into()) {
                c.queue(item);
            }
        }
        let weak = Arc::downgrade(&c);
        drop(c);
        if let Some(c) = weak.upgrade() {
            assert!(c.flush(Duration::from_secs(30)));
        }
        let again = open(d.path(), 1 << 30);
        let e = again.entry(&id("s3://b/queued", n * PIECE, "e1")).unwrap();
        for k in 0..n {
            let got = again.get(&e, k);
            assert!(
                got.as_deref() == Some(&piece(k, PIECE as usize)[..]),
                "piece {k} of {n}: {}",
                if got.is_some() {
                    "other bytes"
                } else {
                    "not written"
                }
            );
        }
    }

    #[test]
    fn a_changed_object_never_gets_old_bytes_and_its_old_version_is_removed() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), 1 << 30);
        let old = c.entry(&id("gs://b/k", 10, "v1")).unwrap();
        c.put(&old, 0, &piece(0, 10).into());
        // Same size, another ETag.
        let new = c.entry(&id("gs://b/k", 10, "v2")).unwrap();
        assert!(c.get(&new, 0).is_none());
        assert!(
            !old.segment_path(0).exists(),
            "the old version's pieces are gone"
        );
        assert_eq!(list(d.path()).unwrap().len(), 1);
        // Another URL is not touched.
        let other = c.entry(&id("gs://b/other", 10, "v1")).unwrap();
        c.put(&other, 0, &piece(1, 10).into());
        let _ = c.entry(&id("gs://b/k", 10, "v3")).unwrap();
        assert_eq!(c.get(&other, 0).unwrap(), piece(1, 10));
    }

    /// Rewrites bytes `at..` of `e`'s segment file holding piece `n` with `bytes`.
    fn poke(e: &Entry, n: u64, at: u64, bytes: &[u8]) {
        use std::os::unix::fs::FileExt;
        let f = File::options().write(true).open(e.segment_path(n)).unwrap();
        f.write_all_at(bytes, at).unwrap();
    }

    fn absent(e: &Entry, n: u64) -> bool {
        let f = File::open(e.segment_path(n)).unwrap();
        matches!(held(&f, e, n, e.piece_len(n).unwrap()), Held::Absent)
    }

    #[test]
    fn damaged_pieces_are_removed_not_served() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), 1 << 30);
        let e = c.entry(&id("s3://b/k", 3 * 100, "e")).unwrap();
        let _ = e;
        let size = 4 * PIECE;
        let e = c.entry(&id("s3://b/k", size, "e")).unwrap();
        for n in 0..4 {
            c.put(&e, n, &piece(n, PIECE as usize).into());
        }
        // A flipped byte; a slot giving another length (its own check right); a slot whose
        // check is wrong; the file cut short in the last piece.
        poke(&e, 0, e.data_at(0) + 1000, &[piece(0, 1001)[1000] ^ 1]);
        poke(&e, 1, Entry::slot_at(1), &slot(0, PIECE as u32 - 1));
        poke(&e, 2, Entry::slot_at(2) + 12, &[0xff]);
        File::options()
            .write(true)
            .open(e.segment_path(3))
            .unwrap()
            .set_len(e.data_at(3) + PIECE / 2)
            .unwrap();
        // Read by another process (this one keeps the last pieces it wrote in memory).
        let other = open(d.path(), 1 << 30);
        let e = other.entry(&id("s3://b/k", size, "e")).unwrap();
        for n in 0..4 {
            assert!(other.get(&e, n).is_none(), "piece {n}");
            assert!(absent(&e, n), "piece {n} removed");
        }
        assert_eq!(other.counters.damaged.load(Ordering::Relaxed), 4);
        assert_eq!(list(d.path()).unwrap()[0].pieces, 0);
        // Fetched again, kept again in the same segment.
        for n in [0u64, 3] {
            other.put(&e, n, &piece(n, PIECE as usize).into());
        }
        let third = open(d.path(), 1 << 30);
        let e = third.entry(&id("s3://b/k", size, "e")).unwrap();
        assert_eq!(third.get(&e, 0).unwrap(), piece(0, PIECE as usize));
        assert_eq!(third.get(&e, 3).unwrap(), piece(3, PIECE as usize));
        assert!(third.get(&e, 1).is_none());
        assert_eq!(third.counters.damaged.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn pieces_opened_in_place_are_checked_and_damaged_ones_removed() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), 1 << 30);
        let e = c.entry(&id("s3://b/k", 3 * PIECE - 5, "e")).unwrap();
        for n in 0..3 {
            let len = if n == 2 {
                PIECE as usize - 5
            } else {
                PIECE as usize
            };
            c.put(&e, n, &piece(n, len).into());
        }
        poke(&e, 1, e.data_at(1) + 777, &[piece(1, 778)[777] ^ 4]);
        let other = open(d.path(), 1 << 30);
        let e = other.entry(&id("s3://b/k", 3 * PIECE - 5, "e")).unwrap();
        for n in [0u64, 2] {
            let p = other.open_checked(&e, n).expect("a good piece opens");
            let want = piece(n, p.size());
            let mut buf = vec![0u8; 1000];
            p.read_at(&mut buf, 12345).unwrap();
            assert_eq!(buf, want[12345..13345]);
            let mut v = b"x".to_vec();
            p.append_to(&mut v, 0, p.size()).unwrap();
            assert!(v[1..] == want[..], "piece {n}");
            // Past its end: an error, not a short buffer.
            assert!(p.read_at(&mut buf, p.size() as u64 - 10).is_err());
        }
        assert!(other.open_checked(&e, 1).is_none(), "a flipped byte");
        assert!(absent(&e, 1), "removed");
        assert!(other.open_checked(&e, 3).is_none(), "no such piece");
        // Cut short after it was opened: reads of it fail (the caller goes to the store).
        let p = other.open_checked(&e, 0).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(e.segment_path(0))
            .unwrap()
            .set_len(e.data_at(0) + 100)
            .unwrap();
        let mut buf = vec![0u8; 4096];
        assert!(p.read_at(&mut buf, 8192).is_err());
        assert!(p.append_to(&mut Vec::new(), 8192, 4096).is_err());
    }

    /// A GiB of pieces is 16 segment files, not 1,024 piece files (what made a cold pass
    /// through the cache slow: creating files), and a segment's pieces are read back from
    /// their slots by another process.
    #[test]
    fn an_object_is_kept_in_one_file_per_segment_of_pieces() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), 1 << 40);
        let n = SEGMENT * 2 + 3;
        let e = c.entry(&id("s3://b/many", n * PIECE - 1, "e")).unwrap();
        let small = Bytes::from(piece(0, PIECE as usize));
        for k in 0..n - 1 {
            c.put(&e, k, &small);
        }
        c.put(&e, n - 1, &piece(0, PIECE as usize - 1).into());
        let files: Vec<String> = fs::read_dir(&e.dir)
            .unwrap()
            .flatten()
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .filter(|f| f != "object")
            .collect();
        let mut files = files;
        files.sort();
        assert_eq!(files, ["0.s", "1.s", "2.s"]);
        let l = list(d.path()).unwrap();
        assert_eq!((l[0].pieces, l[0].bytes), (n, n * PIECE - 1));
        let other = open(d.path(), 1 << 40);
        assert_eq!(other.held(), n * PIECE - 1);
        let e = other.entry(&id("s3://b/many", n * PIECE - 1, "e")).unwrap();
        for k in [0, SEGMENT - 1, SEGMENT, n - 2] {
            assert_eq!(other.get(&e, k).unwrap(), small, "piece {k}");
        }
        assert_eq!(other.get(&e, n - 1).unwrap().len(), PIECE as usize - 1);
    }

    /// Eviction removes whole segments, least recently used first: here 30 objects of one
    /// piece each (a segment each), under a `cache_max` of 10 pieces.
    #[test]
    fn cache_max_is_honoured_least_recently_used_first() {
        let d = tempfile::tempdir().unwrap();
        let max = 10 * PIECE;
        let c = open(d.path(), max);
        let old = SystemTime::now() - Duration::from_secs(1000);
        let mut entries = Vec::new();
        for n in 0..30 {
            let e = c.entry(&id(&format!("s3://b/o{n}"), PIECE, "e")).unwrap();
            c.put(&e, 0, &piece(n, PIECE as usize).into());
            assert!(c.held() <= max, "after object {n}: {} held", c.held());
            // Each segment older than the next.
            let _ = File::options()
                .write(true)
                .open(e.segment_path(0))
                .and_then(|f| f.set_modified(old + Duration::from_secs(n)));
            entries.push(e);
        }
        let held: u64 = scan(&c.objects).iter().map(|f| f.bytes).sum();
        assert!(held <= max && held == c.held(), "{held} on disk");
        // The newest are the ones kept.
        assert!(entries[29].segment_path(0).exists());
        assert!(!entries[0].segment_path(0).exists());
        assert!(c.counters.evicted.load(Ordering::Relaxed) >= 20);
    }

    /// Eviction that needs only part of a segment removes its first pieces and keeps the
    /// rest; a reader that opened one of the removed pieces before still reads its bytes.
    #[test]
    fn eviction_shrinks_a_segment_and_a_reader_keeps_its_bytes() {
        let d = tempfile::tempdir().unwrap();
        let max = 6 * PIECE;
        let c = open(d.path(), max);
        let who = id("s3://b/seg", 8 * PIECE, "e");
        let e = c.entry(&who).unwrap();
        for n in 0..5 {
            c.put(&e, n, &piece(n, PIECE as usize).into());
        }
        let reader = open(d.path(), 1 << 40);
        let er = reader.entry(&who).unwrap();
        let p1 = reader.open_checked(&er, 1).expect("piece 1 opens");
        // Piece 6 passes `max`: down to 90% of it, by the segment's first two pieces.
        for n in 5..8 {
            c.put(&e, n, &piece(n, PIECE as usize).into());
            assert!(c.held() <= max, "after piece {n}: {} held", c.held());
        }
        assert_eq!(c.counters.evicted.load(Ordering::Relaxed), 2);
        let third = open(d.path(), 1 << 40);
        assert_eq!(third.held(), 6 * PIECE);
        let e3 = third.entry(&who).unwrap();
        for n in 0..8 {
            let got = third.get(&e3, n);
            if n < 2 {
                assert!(got.is_none(), "piece {n} evicted");
            } else {
                assert_eq!(got.unwrap(), piece(n, PIECE as usize), "piece {n} kept");
            }
        }
        let mut v = Vec::new();
        p1.append_to(&mut v, 0, PIECE as usize).unwrap();
        assert!(v == piece(1, PIECE as usize), "the reader's piece changed");
        let mut names: Vec<String> = fs::read_dir(&e.dir)
            .unwrap()
            .flatten()
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["0.s", "object"], "no temporary file left");
    }

    /// A cache of the layout before segments (`tfmount-v1/`, a file per piece) is removed when
    /// a cache is opened beside it; other directories are not touched.
    #[test]
    fn the_cache_of_an_earlier_layout_is_removed() {
        let d = tempfile::tempdir().unwrap();
        let v1 = d.path().join("tfmount-v1/objects/0123/4567");
        fs::create_dir_all(&v1).unwrap();
        fs::write(v1.join("0.p"), b"an old piece").unwrap();
        fs::create_dir_all(d.path().join("mine")).unwrap();
        let _c = open(d.path(), 1 << 30);
        assert!(!d.path().join("tfmount-v1").exists());
        assert!(d.path().join("mine").is_dir() && d.path().join(LAYOUT).is_dir());
    }

    #[test]
    fn leftovers_of_a_killed_writer_are_ignored_then_removed() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), 1 << 30);
        let e = c.entry(&id("s3://b/k", PIECE, "e")).unwrap();
        let tmp = e.dir.join(".tmp-999999-0");
        fs::write(&tmp, b"half a piece").unwrap();
        assert!(c.get(&e, 0).is_none());
        let _ = File::options()
            .write(true)
            .open(&tmp)
            .and_then(|f| f.set_modified(SystemTime::now() - 2 * STALE_TMP));
        let c2 = open(d.path(), 1 << 30);
        assert_eq!(c2.held(), 0);
        assert!(!tmp.exists());
    }

    #[test]
    fn clear_removes_what_it_is_asked_to() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), 1 << 30);
        for url in ["s3://a/x", "s3://a/y", "gs://b/z"] {
            let e = c.entry(&id(url, 4, "e")).unwrap();
            c.put(&e, 0, &Bytes::from_static(b"abcd"));
        }
        assert_eq!(clear(d.path(), Some("s3://a/")).unwrap(), (2, 8));
        let l = list(d.path()).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].url, "gs://b/z");
        assert_eq!(clear(d.path(), None).unwrap().0, 1);
        assert!(list(d.path()).unwrap().is_empty());
        assert!(list(&d.path().join("nope")).is_err());
    }

    #[test]
    fn objects_without_a_version_are_not_cached() {
        assert!(Identity::new("https://h/x", 5, None, 0).is_none());
        assert_eq!(
            Identity::new("https://h/x", 5, None, 1700000000)
                .unwrap()
                .version,
            "modified=1700000000"
        );
    }
}
