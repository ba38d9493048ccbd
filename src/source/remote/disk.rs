//! The persistent disk cache of object storage (`-o cache_dir=DIR,cache_max=SIZE`, or
//! `TFMOUNT_CACHE_DIR` / `TFMOUNT_CACHE_MAX`): pieces of remote objects kept on local disk, so
//! that a second mount (another process, after a reboot) reads local bytes.
//!
//! Layout, under `DIR/tfmount-v1/`:
//! - `lock`: taken (`flock`, exclusive) while pieces are evicted or the cache is cleared;
//! - `objects/<U>/<I>/`: one object version. `U` is a hash of its URL, `I` of its identity
//!   (`size=N etag=E`, or `size=N modified=T` where the store gives no ETag). The directory's
//!   `object` file holds the URL, the identity and the object's size; a directory whose `object`
//!   file names another URL (a hash collision) is not used. An object whose identity changed
//!   gets a new directory, and the old versions of its URL are removed when it is first used:
//!   a changed object never serves old bytes.
//! - `objects/<U>/<I>/<n>.p`: piece `n`, the object's bytes `[n·PIECE, (n+1)·PIECE)` (the last
//!   piece ends at the object's end), followed by its CRC-32C and the magic `tfmc`. A piece is
//!   written to a temporary file and renamed into place, so a reader sees a whole piece or none,
//!   also when two mounts share `DIR` or a daemon is killed mid-write (its temporary files are
//!   removed by the next cache opened on `DIR` once they are an hour old).
//! - Every piece read back is checked (length, CRC-32C, magic): a damaged one is removed, logged
//!   once and fetched again, never served.
//! - `asked/<S>`: for a SOURCE (`S` a hash of its URL, which the file's first line names), the
//!   keys its last mount asked about after its first probes (a store that cannot list: the
//!   data shards and `.meta` an index names), at most 256: the next mount asks about them in
//!   its first round. Only a hint: what the answers say is what is used.
//!
//! Bounded by `cache_max` (default: half the free space of `DIR`'s file system when the cache is
//! opened, plus what the cache already holds): when the bytes a process has seen written pass
//! it, the least recently used pieces (by modification time, refreshed on use at most once a
//! minute) are removed until the cache holds 90% of it. Each process counts what it writes and
//! rescans the directory to evict, so two processes sharing `DIR` may together pass `cache_max`
//! by the 10% margin each before one of them rescans.

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
pub(crate) const LAYOUT: &str = "tfmount-v1";
const MAGIC: &[u8; 4] = b"tfmc";
const TRAILER: usize = 8;
/// Temporary files older than this, of any process, are left from a crash.
const STALE_TMP: Duration = Duration::from_secs(3600);
/// A piece's time of use is refreshed when it is older than this.
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

/// A piece on disk whose CRC-32C was checked when it was opened: reads `pread` its file (which
/// stays readable when the cache removes or replaces the piece meanwhile). Nothing of it is
/// held in memory, so a warm read copies each byte once, from the kernel's page cache, as a
/// read of a local file does.
pub(crate) struct OnDisk {
    file: File,
    len: usize,
}

impl OnDisk {
    /// The piece's length (without its trailer).
    pub(crate) fn size(&self) -> usize {
        self.len
    }

    /// Fills `buf` from byte `at` of the piece; fails on a short read (a file cut since).
    pub(crate) fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if at + buf.len() as u64 > self.len as u64 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        self.file.read_exact_at(buf, at)
    }

    /// Appends `n` bytes from byte `at` of the piece to `v`; fails on a short read.
    pub(crate) fn append_to(&self, v: &mut Vec<u8>, at: u64, n: usize) -> io::Result<()> {
        if at + n as u64 > self.len as u64
            || !crate::source::file::pread_append(&self.file, v, n, at)?
        {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        Ok(())
    }
}

/// Piece `n` of `e` (`len` bytes before its trailer) opened, when its file has a whole piece's
/// length (its CRC unchecked: for the readers that check what they read another way).
fn open_whole(e: &Entry, n: u64, len: usize) -> Option<File> {
    let f = File::open(e.piece_path(n)).ok()?;
    f.metadata()
        .is_ok_and(|m| m.len() == (len + TRAILER) as u64)
        .then_some(f)
}

/// A range of pieces' files mapped as one, handed out as [`Bytes`] (the mapping lives as long
/// as they do).
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

    fn piece_path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("{n}.p"))
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
    let caches: Vec<Arc<DiskCache>> = CACHES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
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

/// One piece file found by a scan.
struct Found {
    path: PathBuf,
    bytes: u64,
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
            let mut all = CACHES.lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|w| w.strong_count() > 0);
            all.push(Arc::downgrade(&cache));
        }
        let c = Arc::clone(&cache);
        let spawned = std::thread::Builder::new()
            .name("tfmount-cache-scan".into())
            .spawn(move || c.evict(false));
        if spawned.is_err() {
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

    /// Whether piece `n` of `e` is cached (in memory, or a file of the right length; not
    /// checked: [`get`](Self::get) checks).
    pub(crate) fn has(&self, e: &Entry, n: u64) -> bool {
        let Some(len) = e.piece_len(n) else {
            return false;
        };
        self.recent().contains(&(e.serial, n))
            || fs::metadata(e.piece_path(n)).is_ok_and(|m| m.len() == (len + TRAILER) as u64)
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
        let path = e.piece_path(n);
        let f = File::open(&path).ok()?;
        if let Some(why) = check_file(&f, len) {
            self.damaged(e, &path, &why);
            return None;
        }
        touch(&f);
        self.found(e, n, len);
        let p = Arc::new(OnDisk { file: f, len });
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
        let read = crate::source::file::pread_append(&f, v, n, at).unwrap_or(false);
        if read {
            self.found(e, piece, len);
        }
        read
    }

    /// Bytes `range` of the object of `e` as one slice of its pieces' files mapped one after
    /// the other ([`Mapping::concat`](crate::source::mapped::Mapping::concat)), **unchecked** (as
    /// [`read_unchecked`](Self::read_unchecked)), when mapped reads are allowed on this thread
    /// ([`crate::source::mapped::allowed`]: a FUSE reply's read in the daemon, whose guard turns
    /// a page lost to a file cut short into EIO); `None` otherwise, or when a piece is not on
    /// disk whole. Replies are then written to the kernel from the pieces' pages, as from a
    /// local file's: no copy into memory first, none where a read spans two pieces.
    pub(crate) fn map_unchecked(&self, e: &Entry, range: std::ops::Range<u64>) -> Option<Bytes> {
        if !crate::source::mapped::allowed() || range.is_empty() {
            return None;
        }
        let pieces = range.start / PIECE..=(range.end - 1) / PIECE;
        let mut files = Vec::new();
        for n in pieces.clone() {
            let len = e.piece_len(n)?;
            files.push((open_whole(e, n, len)?, len as u64));
        }
        let parts: Vec<(&File, u64)> = files.iter().map(|(f, l)| (f, *l)).collect();
        let map = crate::source::mapped::Mapping::concat(&parts)?;
        if (map.bytes().len() as u64) < range.end - pieces.start() * PIECE {
            return None;
        }
        for (n, (_, len)) in pieces.clone().zip(&files) {
            self.found(e, n, *len as usize);
        }
        let a = (range.start - pieces.start() * PIECE) as usize;
        Some(Bytes::from_owner(MappedPiece {
            map,
            a,
            b: a + (range.end - range.start) as usize,
        }))
    }

    /// Records piece `n` of `e` as handled by this cache (written, or counted as found);
    /// whether it was not before.
    fn account(&self, e: &Entry, n: u64) -> bool {
        self.accounted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((e.serial, n))
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
        let _ = fs::remove_file(e.piece_path(n));
    }

    /// Whether piece `n` of `e` is open for reads in place.
    pub(crate) fn is_open(&self, e: &Entry, n: u64) -> bool {
        self.lock_opened().contains(&(e.serial, n))
    }

    /// Closes piece `n` of `e` if it is open for reads in place (a read of it failed).
    pub(crate) fn close(&self, e: &Entry, n: u64) {
        self.lock_opened().pop(&(e.serial, n));
    }

    /// Counts, logs and removes piece file `path` of `e`, found damaged (`why`).
    fn damaged(&self, e: &Entry, path: &Path, why: &str) {
        self.counters.add(|c| &c.damaged, 1);
        log::warn!(
            "{}: damaged cache file {} ({why}): removed, fetched again",
            e.id.url,
            path.display()
        );
        let _ = fs::remove_file(path);
    }

    fn lock_opened(&self) -> std::sync::MutexGuard<'_, lru::LruCache<(u64, u64), Arc<OnDisk>>> {
        self.opened.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Piece `n` of `e`, checked; `None` if it is not cached (a damaged one is removed).
    pub(crate) fn get(&self, e: &Entry, n: u64) -> Option<Bytes> {
        let len = e.piece_len(n)?;
        if let Some(b) = self.recent().get(&(e.serial, n)) {
            self.counters.add(|c| &c.hits, 1);
            return Some(b.clone());
        }
        let path = e.piece_path(n);
        let mut f = File::open(&path).ok()?;
        // Room for one byte more than a good piece has, so that reading it never grows the
        // buffer (a copy of the piece).
        let mut buf = Vec::with_capacity(len + TRAILER + 1);
        // One byte more than a good piece has, to see a longer file.
        let r = (&mut f)
            .take((len + TRAILER + 1) as u64)
            .read_to_end(&mut buf);
        let bad = match r {
            Err(err) => Some(format!("unreadable: {err}")),
            Ok(_) if buf.len() != len + TRAILER => {
                Some(format!("{} bytes, expected {}", buf.len(), len + TRAILER))
            }
            Ok(_) => {
                let (data, trailer) = buf.split_at(len);
                let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
                if &trailer[4..] != MAGIC {
                    Some("no tfmount piece trailer".into())
                } else if crc32c::crc32c(data) != stored {
                    Some("CRC-32C mismatch".into())
                } else {
                    None
                }
            }
        };
        if let Some(why) = bad {
            self.damaged(e, &path, &why);
            return None;
        }
        touch(&f);
        buf.truncate(len);
        self.counters.add(|c| &c.hits, 1);
        self.found(e, n, len);
        let b = Bytes::from(buf);
        self.recent().put((e.serial, n), b.clone());
        Some(b)
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, lru::LruCache<(u64, u64), Bytes>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
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
        let crc = crc32c::crc32c(data).to_le_bytes();
        let trailer: [u8; TRAILER] = [crc[0], crc[1], crc[2], crc[3], b't', b'f', b'm', b'c'];
        let name = format!("{n}.p");
        let mut r = self.write_atomic(&e.dir, &name, &[data, &trailer]);
        if r.as_ref()
            .is_err_and(|err| err.kind() == io::ErrorKind::NotFound)
        {
            // Evicted meanwhile (by this or another process): made again.
            r = self
                .make_entry(&e.dir, &e.id)
                .and_then(|()| self.write_atomic(&e.dir, &name, &[data, &trailer]));
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
        let n = (data.len() + TRAILER) as u64;
        self.counters.add(|c| &c.writes, 1);
        self.counters.add(|c| &c.write_bytes, data.len() as u64);
        let held = self.held.fetch_add(n, Ordering::Relaxed) + n;
        if held > self.max() && self.scanned.load(Ordering::Relaxed) {
            self.evict(true);
        }
    }

    /// Scans the cache (under its lock): removes stale temporary files, counts what it holds,
    /// and, if that is over `max` (or `force` and over 90% of it), removes the least recently
    /// used pieces until it holds 90% of `max`.
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
                if fs::remove_file(&f.path).is_ok() {
                    held -= f.bytes;
                    self.counters.add(|c| &c.evicted, 1);
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

/// Every piece under `objects` (stale temporary files are removed on the way).
/// Marks a piece file used now (for eviction, least recently used first), at most once a
/// [`TOUCH_AFTER`].
fn touch(f: &File) {
    if let Ok(m) = f.metadata().and_then(|m| m.modified()) {
        if m.elapsed().is_ok_and(|age| age > TOUCH_AFTER) {
            let _ = f.set_modified(SystemTime::now());
        }
    }
}

/// What is wrong with piece file `f` that should hold `len` bytes and the trailer, read through a
/// small buffer; `None` if nothing.
fn check_file(f: &File, len: usize) -> Option<String> {
    use std::os::unix::fs::FileExt;
    match f.metadata() {
        Err(err) => return Some(format!("unreadable: {err}")),
        Ok(m) if m.len() != (len + TRAILER) as u64 => {
            return Some(format!("{} bytes, expected {}", m.len(), len + TRAILER))
        }
        Ok(_) => {}
    }
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let crc = BUF.with(|b| {
        let mut buf = b.borrow_mut();
        let mut crc = 0u32;
        let mut at = 0usize;
        while at < len {
            let n = (len - at).min(CHECK_BUF);
            buf.clear();
            match crate::source::file::pread_append(f, &mut buf, n, at as u64) {
                Ok(true) => {}
                Ok(false) => return Err("cut short".to_string()),
                Err(err) => return Err(format!("unreadable: {err}")),
            }
            crc = crc32c::crc32c_append(crc, &buf);
            at += n;
        }
        Ok(crc)
    });
    let crc = match crc {
        Ok(c) => c,
        Err(why) => return Some(why),
    };
    let mut trailer = [0u8; TRAILER];
    if let Err(err) = f.read_exact_at(&mut trailer, len as u64) {
        return Some(format!("unreadable: {err}"));
    }
    if &trailer[4..] != MAGIC {
        return Some("no tfmount piece trailer".into());
    }
    if crc != u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]) {
        return Some("CRC-32C mismatch".into());
    }
    None
}

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
        if name.ends_with(".p") {
            out.push(Found {
                path: e.path(),
                bytes: m.len(),
                used,
            });
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
        let pieces = scan_dir(&p);
        out.push(CachedObject {
            url,
            identity,
            size,
            pieces: pieces.len() as u64,
            bytes: pieces
                .iter()
                .map(|f| f.bytes.saturating_sub(TRAILER as u64))
                .sum(),
            last_used: pieces.iter().map(|f| f.used).max(),
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
        assert_eq!(b.held(), PIECE + 5 + 2 * TRAILER as u64);
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
            !old.piece_path(0).exists(),
            "the old version's pieces are gone"
        );
        assert_eq!(list(d.path()).unwrap().len(), 1);
        // Another URL is not touched.
        let other = c.entry(&id("gs://b/other", 10, "v1")).unwrap();
        c.put(&other, 0, &piece(1, 10).into());
        let _ = c.entry(&id("gs://b/k", 10, "v3")).unwrap();
        assert_eq!(c.get(&other, 0).unwrap(), piece(1, 10));
    }

    #[test]
    fn damaged_pieces_are_removed_not_served() {
        let d = tempfile::tempdir().unwrap();
        let c = open(d.path(), 1 << 30);
        let e = c.entry(&id("s3://b/k", 3 * 100, "e")).unwrap();
        let _ = e;
        let e = c.entry(&id("s3://b/k", 3 * PIECE, "e")).unwrap();
        for n in 0..3 {
            c.put(&e, n, &piece(n, PIECE as usize).into());
        }
        // A flipped byte, a truncated file, a longer file.
        let p0 = e.piece_path(0);
        let mut b = fs::read(&p0).unwrap();
        b[1000] ^= 1;
        fs::write(&p0, b).unwrap();
        let p1 = e.piece_path(1);
        let b = fs::read(&p1).unwrap();
        fs::write(&p1, &b[..b.len() - 1]).unwrap();
        let p2 = e.piece_path(2);
        let mut b = fs::read(&p2).unwrap();
        b.push(0);
        fs::write(&p2, b).unwrap();
        // Read by another process (this one keeps the last pieces it wrote in memory).
        let other = open(d.path(), 1 << 30);
        let e = other.entry(&id("s3://b/k", 3 * PIECE, "e")).unwrap();
        for n in 0..3 {
            assert!(other.get(&e, n).is_none(), "piece {n}");
            assert!(!e.piece_path(n).exists(), "piece {n} removed");
        }
        assert_eq!(other.counters.damaged.load(Ordering::Relaxed), 3);
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
        let p1 = e.piece_path(1);
        let mut b = fs::read(&p1).unwrap();
        b[777] ^= 4;
        fs::write(&p1, b).unwrap();
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
        assert!(!p1.exists(), "removed");
        assert!(other.open_checked(&e, 3).is_none(), "no such piece");
        // Cut short after it was opened: reads of it fail (the caller goes to the store).
        let p = other.open_checked(&e, 0).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(e.piece_path(0))
            .unwrap()
            .set_len(100)
            .unwrap();
        let mut buf = vec![0u8; 4096];
        assert!(p.read_at(&mut buf, 8192).is_err());
        assert!(p.append_to(&mut Vec::new(), 8192, 4096).is_err());
    }

    #[test]
    fn cache_max_is_honoured_least_recently_used_first() {
        let d = tempfile::tempdir().unwrap();
        let max = 10 * (PIECE + TRAILER as u64);
        let c = open(d.path(), max);
        let e = c.entry(&id("s3://b/big", 30 * PIECE, "e")).unwrap();
        let old = SystemTime::now() - Duration::from_secs(1000);
        for n in 0..30 {
            c.put(&e, n, &piece(n, PIECE as usize).into());
            assert!(c.held() <= max, "after piece {n}: {} held", c.held());
            // Each piece older than the next.
            let _ = File::options()
                .write(true)
                .open(e.piece_path(n))
                .and_then(|f| f.set_modified(old + Duration::from_secs(n)));
        }
        let held: u64 = scan(&c.objects).iter().map(|f| f.bytes).sum();
        assert!(held <= max && held == c.held(), "{held} on disk");
        // The newest pieces are the ones kept.
        assert!(e.piece_path(29).exists());
        assert!(!e.piece_path(0).exists());
        assert!(c.counters.evicted.load(Ordering::Relaxed) >= 20);
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
        assert_eq!(
            clear(d.path(), Some("s3://a/")).unwrap(),
            (2, 4 + TRAILER as u64 * 2 + 4)
        );
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
