//! [`RemoteStore`]: one bucket (or HTTP host) as a [`Store`]: what a key is (HEAD, or a
//! delimited listing for "directories"), directory listings, opening objects, reading small
//! objects whole. Owns the runtime, the memory budget, the block cache and the counters that
//! every [`RemoteFile`] of it shares.
//!
//! Paths are full URLs (`s3://bucket/run/ckpt-1000.index`, `http://host:8000/run/...`), so that
//! every message naming a path names the URL; [`RemoteStore::open_url`] gives the store and the
//! path its URL names. A relative path (`run/ckpt-1000.index`) is a key too. Plain HTTP cannot
//! list: [`Store::list`] fails with `Unsupported`, and a path is a directory when `path/`
//! answers 2xx or 403 (as servers answer for a directory without an index), or when an object
//! under it has been seen (servers that answer 404 for every directory URL).

use crate::sync::lock;
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::{Path as Key, PathPart};
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore, ObjectStoreExt};

use crate::source::bytes::{file_type, ByteSource, EntryKind, FileMeta, Store};
use crate::source::remote::budget::Budget;
use crate::source::remote::cause::map_err;
use crate::source::remote::config::RemoteConfig;
use crate::source::remote::disk::{DiskCache, MAX_ASKED};
use crate::source::remote::file::RemoteFile;
use crate::source::remote::read::{Io, Object, PartCache, Reads, BLOCK};
use crate::source::remote::runtime::Rt;
use crate::source::remote::stats::{Counters, Stats};
use crate::source::remote::url::{RemoteUrl, Scheme};
use crate::source::remote::{cause, config, url as rurl, RemoteError};

/// Most entries one directory listing may return.
pub(crate) const MAX_LIST: usize = 200_000;
/// Most listed objects whose metadata is kept for their open.
const MAX_LISTED: usize = 50_000;
/// The bytes of an `.index` [`RemoteStore::probe_ahead`] fetches: its footer and the blocks
/// before it (all of an index of up to ~10,000 tensors).
const INDEX_TAIL: u64 = 1 << 20;
/// Extensions of files that are no checkpoint prefix (a `.tflite`, a Keras file, a graph, an
/// index or manifest): [`RemoteStore::probe_ahead`] asks for no `.index` beside them.
const NOT_PREFIXES: [&str; 11] = [
    "tflite",
    "keras",
    "h5",
    "hdf5",
    "json",
    "pb",
    "pbtxt",
    "meta",
    "index",
    "safetensors",
    "zip",
];
/// HEADs [`Store::expect`] sends at once.
const EXPECT_AT_ONCE: usize = 16;

/// Keeps a probe's answer `v` for `key` in `map`, up to [`MAX_LISTED`] answers.
fn remember<V>(map: &Mutex<HashMap<String, V>>, key: &Key, v: V) {
    let mut m = lock(map);
    if m.len() < MAX_LISTED {
        m.insert(key.as_ref().to_string(), v);
    }
}
/// Complete directory listings kept, to answer what a path in them is without a request
/// (a remote source is a snapshot: its listings do not change while it is mounted).
const LISTINGS: usize = 256;
/// Listings of more entries than this are not kept.
const MAX_KEPT_LISTING: usize = 10_000;

/// A directory's entries: name -> whether it is a directory, and an object's metadata.
type Listing = Arc<HashMap<String, (bool, Option<ObjectMeta>)>>;

/// What every file of a store shares.
pub(crate) struct Ctx {
    /// What every read of the store's objects shares.
    pub(crate) reads: Arc<Reads>,
    /// `s3://bucket/`, `https://host/`: URLs of keys are this + key.
    pub(crate) prefix: String,
    pub(crate) scheme: Scheme,
    pub(crate) credentials: String,
    lister: Option<Arc<dyn PaginatedListStore>>,
    /// Plain HTTP: tells a directory by a HEAD of `path/`.
    dir_probe: Option<reqwest::Client>,
    /// Plain HTTP: directories known to exist because an object under them answered (bounded).
    seen_dirs: Mutex<HashSet<String>>,
    /// Metadata of objects seen in listings, taken by the next open of each (no HEAD then).
    listed: Mutex<HashMap<String, ObjectMeta>>,
    /// Complete listings of directories, by key (see [`LISTINGS`]).
    listings: Mutex<lru::LruCache<String, Listing>>,
    /// What HEADs and directory probes answered, by key (bounded: [`MAX_LISTED`] each): a
    /// source is a snapshot, so no probe is sent twice (the mount's checks, the probe of what
    /// SOURCE is and the formats' detection ask the same questions), and an object a HEAD
    /// found is opened without another.
    heads: Mutex<HashMap<String, Option<ObjectMeta>>>,
    dirs: Mutex<HashMap<String, bool>>,
    /// Objects opened by a GET of their tail ahead of their first open (an `.index`, by
    /// [`RemoteStore::probe_ahead`]), taken by it.
    opened_ahead: Mutex<HashMap<String, Arc<RemoteFile>>>,
    /// The SOURCE probed ([`RemoteStore::probe_ahead`]), and the keys asked about for it since
    /// by [`Store::expect`] (kept in the disk cache for its next mount: see
    /// [`DiskCache::asked`]).
    source: std::sync::OnceLock<String>,
    asked: Mutex<Vec<String>>,
    next_id: AtomicU64,
    uid: u32,
    gid: u32,
}

impl Ctx {
    pub(crate) fn timeout_err(&self, url: &str) -> RemoteError {
        RemoteError::Timeout {
            url: url.to_string(),
            after: self.reads.timeout,
        }
    }

    /// Runs `fut` on the runtime from synchronous code, bounded by `remote_timeout`.
    pub(crate) fn run<T: Send>(
        &self,
        url: &str,
        fut: impl Future<Output = Result<T, RemoteError>> + Send,
    ) -> Result<T, RemoteError> {
        let t = self.reads.timeout;
        self.reads
            .rt
            .block_on(async move { tokio::time::timeout(t, fut).await })
            .unwrap_or_else(|_| Err(self.timeout_err(url)))
    }

    /// An opened object as a file of the store.
    pub(crate) fn file(&self, obj: Object) -> RemoteFile {
        let meta = self.file_meta(Some(obj.last_modified));
        RemoteFile::new(Arc::clone(&self.reads), obj, meta)
    }

    /// Owner and mode shown for remote files and directories: the daemon's user, read-only.
    pub(crate) fn file_meta(&self, mtime: Option<DateTime<Utc>>) -> FileMeta {
        let mtime = mtime
            .and_then(|t| {
                let secs = u64::try_from(t.timestamp()).ok()?;
                let d = Duration::new(secs, t.timestamp_subsec_nanos());
                std::time::UNIX_EPOCH.checked_add(d)
            })
            .unwrap_or(std::time::UNIX_EPOCH);
        FileMeta {
            mtime,
            uid: self.uid,
            gid: self.gid,
            mode: file_type::REG | 0o444,
        }
    }

    fn url(&self, key: &Key) -> String {
        format!("{}{}", self.prefix, key.as_ref())
    }

    /// The key a store path names: a URL of this store (`s3://b/run/ckpt`) or a relative path
    /// (`run/ckpt`); `.` dropped, `..` taken lexically (never above the root).
    fn key_of(&self, path: &Path) -> Result<Key, RemoteError> {
        let origin = self.prefix.strip_suffix('/').unwrap_or(&self.prefix);
        let rel = path
            .to_str()
            .and_then(|s| s.strip_prefix(origin))
            .filter(|r| r.is_empty() || r.starts_with('/'))
            .map_or(path, Path::new);
        key_of(rel).map_err(|e| match e {
            RemoteError::Config(m) if !m.starts_with(origin) => {
                RemoteError::Config(format!("{}{m}", self.prefix))
            }
            e => e,
        })
    }
}

/// Most directories remembered as seen (plain HTTP).
const MAX_SEEN_DIRS: usize = 10_000;

/// One bucket or HTTP host.
pub struct RemoteStore {
    ctx: Arc<Ctx>,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("prefix", &self.ctx.prefix)
            .field("credentials", &self.ctx.credentials)
            .finish()
    }
}

/// The key a store path names: relative components, `.` dropped, `..` taken lexically.
fn key_of(path: &Path) -> Result<Key, RemoteError> {
    let bad = |why: &str| RemoteError::Config(format!("{}: {why}", path.display()));
    let mut parts: Vec<&str> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(s) => {
                let s = s.to_str().ok_or_else(|| bad("not UTF-8"))?;
                PathPart::parse(s).map_err(|e| bad(&e.to_string()))?;
                parts.push(s);
            }
            Component::ParentDir => {
                parts.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Key::parse(parts.join("/")).map_err(|e| bad(&e.to_string()))
}

/// Percent-encodes one URL path segment.
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl RemoteStore {
    /// The store a URL names and the path it names in it (`s3://b/run/ckpt/` gives the store of
    /// bucket `b` and the path `s3://b/run/ckpt`: the URL, normalized, see the module doc).
    /// Fails (one line) on a bad URL or missing credentials; sends no request.
    pub fn open_url(url: &str, cfg: &RemoteConfig) -> Result<(RemoteStore, PathBuf), RemoteError> {
        let u = rurl::parse(url)?;
        let store = RemoteStore::new(&u, cfg)?;
        let prefix = u.store_prefix();
        let path = if u.key.is_empty() {
            prefix.strip_suffix('/').unwrap_or(&prefix).to_string()
        } else {
            format!("{prefix}{}", u.key)
        };
        Ok((store, PathBuf::from(path)))
    }

    /// The store of a parsed URL's bucket or host.
    pub(crate) fn new(url: &RemoteUrl, cfg: &RemoteConfig) -> Result<RemoteStore, RemoteError> {
        let built = config::build(url, cfg)?;
        Self::build(
            built.store,
            built.lister,
            built.dir_probe,
            url.store_prefix(),
            url.scheme,
            built.credentials,
            cfg,
        )
    }

    /// A store over any `object_store` client (tests: `InMemory`, `ThrottledStore`). Listing
    /// goes through `ObjectStore::list_with_delimiter`.
    #[cfg(test)]
    pub(crate) fn with_object_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        cfg: &RemoteConfig,
    ) -> Result<RemoteStore, RemoteError> {
        Self::build(
            store,
            None,
            None,
            prefix.to_string(),
            Scheme::S3,
            "given".into(),
            cfg,
        )
    }

    fn build(
        store: Arc<dyn ObjectStore>,
        lister: Option<Arc<dyn PaginatedListStore>>,
        dir_probe: Option<reqwest::Client>,
        prefix: String,
        scheme: Scheme,
        credentials: String,
        cfg: &RemoteConfig,
    ) -> Result<RemoteStore, RemoteError> {
        let rt = Rt::new().map_err(|e| {
            RemoteError::Config(format!("{prefix}: cannot start the I/O runtime: {e}"))
        })?;
        // A cache directory that cannot be used (read-only, not a directory) is not an
        // error: the reads go to memory, said once per process.
        let disk = cfg
            .cache_dir
            .as_ref()
            .and_then(|d| match DiskCache::open(d, cfg.cache_max) {
                Ok(c) => Some(c),
                Err(e) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        log::warn!(
                            "cache_dir: {e}; object storage is read without a disk cache \
                             (-o cache_dir=DIR elsewhere, or cache_dir=none to say so)"
                        )
                    });
                    None
                }
            });
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let budget = Budget::new(cfg.cache_bytes);
        // Without a disk cache the block cache in memory keeps every piece fetched (the
        // object read-ahead's window among them): half the budget, not a quarter.
        let cache = Arc::new(PartCache::new(if disk.is_some() {
            cfg.cache_bytes / 4
        } else {
            cfg.cache_bytes / 2
        }));
        let part = cfg.part.max(BLOCK);
        let window = part.saturating_mul(cfg.parallel.max(1) as u64);
        Ok(RemoteStore {
            ctx: Arc::new(Ctx {
                reads: Arc::new(Reads {
                    rt,
                    io: Arc::new(Io {
                        store,
                        counters: Arc::new(Counters::default()),
                        timeout: cfg.timeout,
                        disk,
                        mem: Arc::clone(&cache),
                        budget: Arc::clone(&budget),
                        part,
                        window,
                        object_ahead: cfg.object_read_ahead,
                    }),
                    budget,
                    cache,
                    timeout: cfg.timeout,
                }),
                prefix,
                scheme,
                credentials,
                lister,
                dir_probe,
                seen_dirs: Mutex::new(HashSet::new()),
                listed: Mutex::new(HashMap::new()),
                heads: Mutex::new(HashMap::new()),
                dirs: Mutex::new(HashMap::new()),
                opened_ahead: Mutex::new(HashMap::new()),
                source: std::sync::OnceLock::new(),
                asked: Mutex::new(Vec::new()),
                listings: Mutex::new(lru::LruCache::new(
                    std::num::NonZeroUsize::new(LISTINGS).unwrap_or(std::num::NonZeroUsize::MIN),
                )),
                next_id: AtomicU64::new(1),
                uid,
                gid,
            }),
        })
    }

    /// Where the credentials come from (for a log line at mount).
    pub fn credentials(&self) -> &str {
        &self.ctx.credentials
    }

    /// The URL of a path of this store.
    pub(crate) fn url_of(&self, path: &Path) -> String {
        match self.ctx.key_of(path) {
            Ok(k) => self.ctx.url(&k),
            Err(_) if path.starts_with(self.ctx.prefix.trim_end_matches('/')) => {
                path.display().to_string()
            }
            Err(_) => format!("{}{}", self.ctx.prefix, path.display()),
        }
    }

    /// Requests made and bytes fetched so far, and the budget in use.
    pub fn stats(&self) -> Stats {
        let (gets, heads, lists, bytes) = self.ctx.reads.io.counters.snapshot();
        Stats {
            gets,
            heads,
            lists,
            bytes_fetched: bytes,
            budget_used: self.ctx.reads.budget.used(),
            budget_peak: self.ctx.reads.budget.peak(),
            ..self.disk_stats()
        }
    }

    fn disk_stats(&self) -> Stats {
        let Some(d) = &self.ctx.reads.io.disk else {
            return Stats::default();
        };
        let c = &d.counters;
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            disk_hit_bytes: n(&c.hit_bytes),
            disk_write_bytes: n(&c.write_bytes),
            disk_damaged: n(&c.damaged),
            disk_evicted: n(&c.evicted),
            ..Stats::default()
        }
    }

    /// The disk cache, if `cache_dir` gave one.
    pub(crate) fn disk_cache(&self) -> Option<&Arc<DiskCache>> {
        self.ctx.reads.io.disk.as_ref()
    }

    /// Bytes held by the block cache now.
    #[cfg(test)]
    pub(crate) fn cached_bytes(&self) -> u64 {
        self.ctx.reads.cache.bytes()
    }

    /// The underlying `object_store` client (tests, benchmarks: uploads).
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        Arc::clone(&self.ctx.reads.io.store)
    }

    fn new_object(&self, meta: &object_store::ObjectMeta) -> Object {
        let id = self.ctx.next_id.fetch_add(1, Ordering::Relaxed);
        Object::new(meta, self.ctx.url(&meta.location), id)
    }

    /// HEAD of `key`: `Ok(None)` if there is no such object. Answered once per key (see
    /// `Ctx::heads`); failures are not kept.
    fn head(&self, key: &Key) -> Result<Option<object_store::ObjectMeta>, RemoteError> {
        if key.as_ref().is_empty() {
            return Ok(None);
        }
        if let Some(m) = lock(&self.ctx.heads).get(key.as_ref()) {
            return Ok(m.clone());
        }
        let m = self.head_now(key)?;
        remember(&self.ctx.heads, key, m.clone());
        Ok(m)
    }

    /// HEAD of `key` sent now (what changed since is seen: a live directory's stamps).
    fn head_now(&self, key: &Key) -> Result<Option<object_store::ObjectMeta>, RemoteError> {
        if key.as_ref().is_empty() {
            return Ok(None);
        }
        let url = self.ctx.url(key);
        let io = &self.ctx.reads.io;
        log::debug!("HEAD {url}");
        self.ctx.run(&url, async {
            Counters::add(&io.counters.heads, 1);
            match io.store.head(key).await {
                Ok(m) => {
                    self.saw_object(key);
                    Ok(Some(m))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(map_err(&url, self.ctx.reads.timeout, e)),
            }
        })
    }

    /// Entries directly under `dir` (at most `max`): `(name, is_dir)`.
    fn list_keys(&self, dir: &Key, max: usize) -> Result<Vec<(String, bool)>, RemoteError> {
        let url = self.ctx.url(dir);
        if self.ctx.scheme == Scheme::Http {
            return Err(RemoteError::Unsupported {
                url,
                what: "plain HTTP cannot list directories (give the checkpoint prefix, or a SavedModel directory)".into(),
            });
        }
        let io = &self.ctx.reads.io;
        let name_of = |p: &Key| -> Option<String> {
            let rest = p.prefix_match(dir)?;
            let parts: Vec<_> = rest.collect();
            match parts.as_slice() {
                [one] => Some(one.as_ref().to_string()),
                _ => None,
            }
        };
        let mut out = Vec::new();
        let mut metas: HashMap<String, ObjectMeta> = HashMap::new();
        let mut note = |objects: &[ObjectMeta]| {
            for o in objects {
                if let Some(n) = name_of(&o.location) {
                    metas.insert(n, o.clone());
                }
            }
        };
        match &self.ctx.lister {
            Some(lister) => {
                let prefix = if dir.as_ref().is_empty() {
                    None
                } else {
                    Some(format!("{}/", dir.as_ref()))
                };
                let mut token = None;
                loop {
                    let opts = PaginatedListOptions {
                        delimiter: Some("/".into()),
                        max_keys: Some(1000.min(max.max(1))),
                        page_token: token.take(),
                        ..Default::default()
                    };
                    log::debug!("LIST {url}/");
                    let page = self.ctx.run(&url, async {
                        Counters::add(&io.counters.lists, 1);
                        lister
                            .list_paginated(prefix.as_deref(), opts)
                            .await
                            .map_err(|e| map_err(&url, self.ctx.reads.timeout, e))
                    })?;
                    for p in &page.result.common_prefixes {
                        out.extend(name_of(p).map(|n| (n, true)));
                    }
                    for o in &page.result.objects {
                        out.extend(name_of(&o.location).map(|n| (n, false)));
                    }
                    self.remember(&page.result.objects);
                    note(&page.result.objects);
                    if out.len() >= max {
                        if page.page_token.is_none() && out.len() == max {
                            self.keep_listing(dir, &out, &metas);
                        }
                        out.truncate(max);
                        break;
                    }
                    match page.page_token {
                        Some(t) => token = Some(t),
                        None => {
                            self.keep_listing(dir, &out, &metas);
                            break;
                        }
                    }
                }
            }
            None => {
                log::debug!("LIST {url}/");
                let r = self.ctx.run(&url, async {
                    Counters::add(&io.counters.lists, 1);
                    io.store
                        .list_with_delimiter(Some(dir))
                        .await
                        .map_err(|e| map_err(&url, self.ctx.reads.timeout, e))
                })?;
                out.extend(
                    r.common_prefixes
                        .iter()
                        .filter_map(|p| name_of(p).map(|n| (n, true))),
                );
                out.extend(
                    r.objects
                        .iter()
                        .filter_map(|o| name_of(&o.location).map(|n| (n, false))),
                );
                self.remember(&r.objects);
                note(&r.objects);
                if out.len() <= max {
                    self.keep_listing(dir, &out, &metas);
                }
                out.truncate(max);
            }
        }
        Ok(out)
    }

    /// Keeps the complete listing `entries` of `dir` (bounded).
    fn keep_listing(
        &self,
        dir: &Key,
        entries: &[(String, bool)],
        metas: &HashMap<String, ObjectMeta>,
    ) {
        if entries.len() > MAX_KEPT_LISTING {
            return;
        }
        let map: HashMap<String, (bool, Option<ObjectMeta>)> = entries
            .iter()
            .map(|(n, d)| (n.clone(), (*d, metas.get(n).cloned().filter(|_| !*d))))
            .collect();
        lock(&self.ctx.listings).put(dir.as_ref().to_string(), Arc::new(map));
    }

    /// What `key` is by its directory's kept listing: `Some(None)` when the listing has no
    /// such name, `None` when no listing of its directory is kept.
    fn by_listing(&self, key: &Key) -> Option<Option<EntryKind>> {
        let k = key.as_ref();
        if k.is_empty() {
            return None;
        }
        let mut listings = lock(&self.ctx.listings);
        // A directory listed with something in it (after a HEAD found no object of its name).
        if listings.get(k).is_some_and(|l| !l.is_empty()) {
            return Some(Some(EntryKind::Dir));
        }
        let (dir, name) = k.rsplit_once('/').unwrap_or(("", k));
        let listing = listings.get(dir).cloned()?;
        drop(listings);
        Some(
            listing
                .get(name)
                .map(|(d, _)| if *d { EntryKind::Dir } else { EntryKind::File }),
        )
    }

    /// HTTP: does `key/` answer like a directory (2xx, or 403 as a server without directory
    /// listings answers)? A server may answer 404 for every directory URL: then `key` is a
    /// directory if an object under it was seen.
    fn http_dir(&self, key: &Key) -> Result<bool, RemoteError> {
        let Some(probe) = &self.ctx.dir_probe else {
            return Ok(false);
        };
        if self.seen_dir(key) {
            return Ok(true);
        }
        let mut u = self.ctx.prefix.clone();
        for p in key.parts() {
            u.push_str(&encode_segment(p.as_ref()));
            u.push('/');
        }
        let url = format!("{}/", self.ctx.url(key));
        let io = &self.ctx.reads.io;
        let timeout = self.ctx.reads.timeout;
        log::debug!("HEAD {url}");
        self.ctx.run(&url, async {
            Counters::add(&io.counters.heads, 1);
            let r = probe
                .head(&u)
                .send()
                .await
                .map_err(|e| cause::from_reqwest(&url, timeout, &e))?;
            let s = r.status();
            Ok(s.is_success() || s == reqwest::StatusCode::FORBIDDEN)
        })
    }

    /// Plain HTTP: whether an object under `key/` has answered.
    fn seen_dir(&self, key: &Key) -> bool {
        lock(&self.ctx.seen_dirs).contains(key.as_ref())
    }

    /// Plain HTTP: the directories above object `key` exist (remembered, bounded).
    fn saw_object(&self, key: &Key) {
        if self.ctx.scheme != Scheme::Http {
            return;
        }
        let mut seen = lock(&self.ctx.seen_dirs);
        let k = key.as_ref();
        for (i, _) in k.match_indices('/') {
            if seen.len() >= MAX_SEEN_DIRS {
                return;
            }
            seen.insert(k[..i].to_string());
        }
    }

    /// What `path` is: a file (an object), a directory (a key prefix with objects under it, or
    /// the bucket root), or nothing. Unlike [`Store::kind`], says why it could not tell. Takes
    /// at most `remote_timeout` when the store does not answer.
    pub fn try_kind(&self, path: &Path) -> Result<Option<EntryKind>, RemoteError> {
        let key = self.ctx.key_of(path)?;
        if let Some(k) = self.by_listing(&key) {
            return Ok(k);
        }
        Ok(self.stat(&key)?.map(|(k, _)| k))
    }

    /// What `key` is, with the object's metadata if it is one.
    fn stat(
        &self,
        key: &Key,
    ) -> Result<Option<(EntryKind, Option<object_store::ObjectMeta>)>, RemoteError> {
        match self.head(key) {
            Ok(Some(m)) => return Ok(Some((EntryKind::File, Some(m)))),
            Ok(None) => {}
            // Over HTTP a directory's HEAD may fail (a redirect to `path/`, then 403).
            Err(e)
                if self.ctx.scheme == Scheme::Http && !matches!(e, RemoteError::Timeout { .. }) =>
            {
                // Said in the HEAD's words (a failed probe of `key/` says the same or less).
                return match self.is_dir(key) {
                    Ok(true) => Ok(Some((EntryKind::Dir, None))),
                    Ok(false) | Err(_) => Err(e),
                };
            }
            Err(e) => return Err(e),
        }
        Ok(self.is_dir(key)?.then_some((EntryKind::Dir, None)))
    }

    /// Whether `key` (not an object) is a directory: the root, or a prefix with objects under
    /// it (over HTTP: `key/` answers).
    fn is_dir(&self, key: &Key) -> Result<bool, RemoteError> {
        // Over HTTP an object found under `key` since a probe said no makes it one (a server
        // answering 404 for every directory URL).
        if self.ctx.scheme == Scheme::Http && self.seen_dir(key) {
            return Ok(true);
        }
        if let Some(&d) = lock(&self.ctx.dirs).get(key.as_ref()) {
            return Ok(d);
        }
        let d = self.is_dir_now(key)?;
        remember(&self.ctx.dirs, key, d);
        Ok(d)
    }

    fn is_dir_now(&self, key: &Key) -> Result<bool, RemoteError> {
        if key.as_ref().is_empty() && self.ctx.scheme == Scheme::Http {
            return Ok(true);
        }
        if self.ctx.scheme == Scheme::Http {
            return self.http_dir(key);
        }
        // One page (the request a listing of one entry costs), kept when it is the whole
        // directory: what is in it is then known without a request.
        match self.list_keys(key, 1000) {
            Ok(v) => Ok(!v.is_empty() || key.as_ref().is_empty()),
            // A listing in a bucket that exists never answers 404.
            Err(RemoteError::NotFound { .. }) => Err(self.no_bucket(key)),
            Err(RemoteError::Request { msg, .. })
                if msg.contains("no such bucket") || msg.contains("404 Not Found") =>
            {
                Err(self.no_bucket(key))
            }
            Err(e) => Err(e),
        }
    }

    /// The listing of `key` answered 404: the bucket does not exist.
    fn no_bucket(&self, key: &Key) -> RemoteError {
        RemoteError::Request {
            url: self.ctx.url(key),
            msg: format!("no such bucket ({})", cause::status_words(404)),
        }
    }

    /// Why nothing is at `path` (no object, no `path.index`, no directory), in words: the
    /// error a SOURCE that names nothing gets.
    pub(crate) fn missing(&self, path: &Path) -> RemoteError {
        let url = self.url_of(path);
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let msg = match self.ctx.scheme {
            Scheme::Http => format!(
                "{} (and so are {name}.index and {name}/)",
                cause::status_words(404)
            ),
            Scheme::S3 | Scheme::Gcs => format!(
                "{} (and so is {name}.index; no objects under {name}/)",
                cause::status_words(404)
            ),
        };
        RemoteError::Request { url, msg }
    }

    /// The entries of directory `path` (not sorted); an error over plain HTTP.
    pub(crate) fn try_list(&self, path: &Path) -> Result<Vec<(OsString, EntryKind)>, RemoteError> {
        let key = self.ctx.key_of(path)?;
        let kept = lock(&self.ctx.listings).get(key.as_ref()).cloned();
        let v: Vec<(String, bool)> = match kept {
            Some(l) => {
                // As a listing would: the objects' metadata kept for their opens.
                let objects: Vec<ObjectMeta> = l.values().filter_map(|(_, m)| m.clone()).collect();
                self.remember(&objects);
                l.iter().map(|(n, (d, _))| (n.clone(), *d)).collect()
            }
            None => self.list_keys(&key, MAX_LIST + 1)?,
        };
        if v.len() > MAX_LIST {
            return Err(RemoteError::Unsupported {
                url: self.ctx.url(&key),
                what: format!("more than {MAX_LIST} entries in one directory"),
            });
        }
        Ok(v.into_iter()
            .map(|(n, d)| {
                let k = if d { EntryKind::Dir } else { EntryKind::File };
                (OsString::from(n), k)
            })
            .collect())
    }

    /// Keeps the metadata of listed objects for their open (bounded; complete entries only).
    fn remember(&self, objects: &[ObjectMeta]) {
        let mut m = lock(&self.ctx.listed);
        for o in objects {
            if m.len() >= MAX_LISTED {
                break;
            }
            if o.e_tag.is_some() {
                m.insert(o.location.as_ref().to_string(), o.clone());
            }
        }
    }

    /// Sends the first questions opening SOURCE `path` asks at once, instead of one after
    /// another: what `path` is (a HEAD and a directory probe: a LIST, or over HTTP a HEAD of
    /// `path/`) and `path.index` (without a disk cache the GET of its tail, its footer and,
    /// for most checkpoints, all of it; with one its HEAD, its bytes then read through the
    /// cache). Their answers are kept, so the checks
    /// and probes that follow (what SOURCE is, the formats' detection, opening the index) send
    /// none of these again; a failure is not kept, and is met again where it matters.
    pub(crate) fn probe_ahead(&self, path: &Path) {
        let mut index = path.as_os_str().to_owned();
        index.push(".index");
        let index = PathBuf::from(index);
        // A name that is a file of another kind is no checkpoint prefix: no `.index` beside
        // it is asked for (a prefix such as `model.ckpt-1000` has no such extension).
        let other = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| NOT_PREFIXES.contains(&e.to_ascii_lowercase().as_str()));
        let (Ok(key), Ok(ikey)) = (self.ctx.key_of(path), self.ctx.key_of(&index)) else {
            return;
        };
        // What the last mount of this SOURCE asked about after these probes (its data shards),
        // asked now, in the same round.
        let source = self.ctx.url(&key);
        let asked: Vec<Key> = match self.disk_cache() {
            Some(d) => d.asked(&source).into_iter().map(Key::from).collect(),
            None => Vec::new(),
        };
        let _ = self.ctx.source.set(source);
        std::thread::scope(|s| {
            for k in &asked {
                s.spawn(move || {
                    let _ = self.head(k);
                });
            }
            s.spawn(|| {
                let _ = self.head(&key);
            });
            s.spawn(|| {
                let _ = self.is_dir(&key);
            });
            if key.as_ref().is_empty() || other {
                return;
            }
            // With a disk cache that holds a version of the index, it is read from there if
            // it is still that version (a remount sends no GET): only its HEAD now. An index
            // the cache never saw is fetched at once (and kept in it).
            if let Some(d) = self.disk_cache() {
                if d.knows(&self.ctx.url(&ikey)) {
                    s.spawn(|| {
                        let _ = self.head(&ikey);
                    });
                    return;
                }
            }
            s.spawn(|| match self.open_tail(&index, INDEX_TAIL) {
                Ok(f) => {
                    lock(&self.ctx.opened_ahead).insert(ikey.as_ref().to_string(), f);
                }
                Err(RemoteError::NotFound { .. }) => remember(&self.ctx.heads, &ikey, None),
                Err(e) => log::debug!("{e}"),
            });
        });
    }

    /// Opens an object: size, ETag and modification time from the listing that showed it or
    /// the probe that asked about it, if one did since the last open, else from one HEAD.
    pub fn open_file(&self, path: &Path) -> Result<Arc<RemoteFile>, RemoteError> {
        let key = self.ctx.key_of(path)?;
        if let Some(f) = lock(&self.ctx.opened_ahead).remove(key.as_ref()) {
            return Ok(f);
        }
        let listed = lock(&self.ctx.listed).remove(key.as_ref());
        // A HEAD's answer kept by the probes is taken (used once: a later open of the same
        // key asks again, and sees an object that changed since).
        let probed = match lock(&self.ctx.heads).remove(key.as_ref()) {
            Some(Some(m)) => Some(m),
            _ => None,
        };
        let meta = match listed.or(probed) {
            Some(m) => Some(m),
            None => self.head_now(&key)?,
        };
        match meta {
            Some(meta) => Ok(Arc::new(self.ctx.file(self.new_object(&meta)))),
            None => Err(RemoteError::NotFound {
                url: self.ctx.url(&key),
            }),
        }
    }

    /// Opens an object with one GET of its last `tail` bytes instead of a HEAD (an `.index`:
    /// its footer and, often, all of it); those bytes go to the block cache, and the whole
    /// pieces among them to the disk cache, so reading them next costs no request.
    pub fn open_tail(&self, path: &Path, tail: u64) -> Result<Arc<RemoteFile>, RemoteError> {
        let key = self.ctx.key_of(path)?;
        let url = self.ctx.url(&key);
        let tail = tail.clamp(1, 8 * BLOCK);
        let ctx = &self.ctx;
        let deadline = std::time::Instant::now() + ctx.reads.timeout;
        let res = ctx
            .reads
            .budget
            .reserve(tail, deadline)
            .ok_or_else(|| ctx.timeout_err(&url))?;
        let (meta, start, data) = ctx.run(&url, async {
            Counters::add(&ctx.reads.io.counters.gets, 1);
            let opts = GetOptions {
                range: Some(GetRange::Suffix(tail)),
                ..Default::default()
            };
            let r = ctx
                .reads
                .io
                .store
                .get_opts(&key, opts)
                .await
                .map_err(|e| map_err(&url, self.ctx.reads.timeout, e))?;
            let (meta, range) = (r.meta.clone(), r.range.clone());
            let want = range.end.saturating_sub(range.start);
            if want > tail || range.end != meta.size {
                return Err(RemoteError::Request {
                    url: url.clone(),
                    msg: format!(
                        "asked for the last {tail} bytes, got bytes {range:?} of {}",
                        meta.size
                    ),
                });
            }
            let data = collect(&ctx.reads.io, &url, r.into_stream(), want).await?;
            Ok((meta, range.start, data))
        })?;
        self.saw_object(&key);
        remember(&self.ctx.heads, &key, Some(meta.clone()));
        let obj = self.new_object(&meta);
        let file = ctx.file(obj);
        // Cut into cache blocks (the first may start inside its block).
        let mut at = start;
        let mut rest = data.freeze();
        while !rest.is_empty() {
            let block = at / BLOCK;
            let n = ((block + 1) * BLOCK - at).min(rest.len() as u64) as usize;
            let piece = rest.split_to(n);
            if at % BLOCK == 0 {
                file.h.keep_on_disk(block, &piece);
            }
            ctx.reads
                .cache
                .insert(&ctx.reads.budget, file.h.obj.id, block, at, piece);
            at += n as u64;
        }
        drop(res);
        Ok(Arc::new(file))
    }

    /// A whole object of at most `max` bytes in one GET (no HEAD). Larger objects are refused
    /// after the answer's headers, their body unread.
    pub(crate) fn read_whole_object(&self, path: &Path, max: u64) -> Result<Vec<u8>, RemoteError> {
        let key = self.ctx.key_of(path)?;
        let url = self.ctx.url(&key);
        let ctx = &self.ctx;
        log::debug!("GET {url} (whole)");
        ctx.run(&url, async {
            Counters::add(&ctx.reads.io.counters.gets, 1);
            let r = ctx
                .reads
                .io
                .store
                .get_opts(&key, GetOptions::default())
                .await
                .map_err(|e| map_err(&url, self.ctx.reads.timeout, e))?;
            if r.meta.size > max {
                return Err(RemoteError::Unsupported {
                    url: url.clone(),
                    what: format!("{} bytes, more than the {max}-byte limit", r.meta.size),
                });
            }
            self.saw_object(&key);
            let size = r.meta.size;
            Ok(collect(&ctx.reads.io, &url, r.into_stream(), size)
                .await?
                .to_vec())
        })
    }
}

/// Collects exactly `len` bytes of a body (no more is ever buffered).
async fn collect(
    io: &Io,
    url: &str,
    mut stream: futures_util::stream::BoxStream<'static, object_store::Result<bytes::Bytes>>,
    len: u64,
) -> Result<BytesMut, RemoteError> {
    let cap = usize::try_from(len).map_err(|_| RemoteError::Request {
        url: url.into(),
        msg: format!("{len} bytes do not fit in memory"),
    })?;
    let mut out = BytesMut::with_capacity(cap);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| map_err(url, io.timeout, e))?;
        io.counters.received(chunk.len() as u64);
        if out.len() + chunk.len() > cap {
            return Err(RemoteError::Request {
                url: url.into(),
                msg: format!("the server sent more than the {len} bytes it announced"),
            });
        }
        out.extend_from_slice(&chunk);
    }
    if out.len() != cap {
        return Err(RemoteError::Request {
            url: url.into(),
            msg: format!("the answer ended after {} of {len} bytes", out.len()),
        });
    }
    Ok(out)
}

impl Store for RemoteStore {
    fn kind(&self, path: &Path) -> Option<EntryKind> {
        match self.try_kind(path) {
            Ok(k) => k,
            Err(e) => {
                log::warn!("{e}");
                None
            }
        }
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<(OsString, EntryKind)>> {
        Ok(self.try_list(dir)?)
    }

    fn is_remote(&self) -> bool {
        true
    }

    fn cache_words(&self) -> Option<String> {
        Some(match self.disk_cache() {
            Some(d) => {
                let max = match d.max() {
                    u64::MAX => "half the free space of its file system".to_string(),
                    m => format!("{m} bytes"),
                };
                // The directory the user gave or has by default, not its layout's.
                let dir = d.root().parent().unwrap_or(d.root());
                format!(
                    "object storage, kept in the disk cache {} (up to {max}; shared by every \
                     mount and subcommand that uses it; -o cache_dir=none: no disk cache)",
                    dir.display()
                )
            }
            None => "object storage, no disk cache (cache_dir=none, or the cache directory \
                     was unusable): what is read is kept in memory only (remote_cache)"
                .to_string(),
        })
    }

    fn stats_line(&self) -> Option<String> {
        let s = self.stats();
        let disk = match self.disk_cache() {
            Some(d) => format!(
                ", disk cache {}: {} bytes read, {} written, {} damaged pieces refetched, {} evicted",
                d.root().display(),
                s.disk_hit_bytes,
                s.disk_write_bytes,
                s.disk_damaged,
                s.disk_evicted
            ),
            None => String::new(),
        };
        Some(format!(
            "requests {} (GET {}, HEAD {}, LIST {}), bytes fetched {}, memory budget peak {}{disk}",
            s.gets + s.heads + s.lists,
            s.gets,
            s.heads,
            s.lists,
            s.bytes_fetched,
            s.budget_peak
        ))
    }

    fn open(&self, path: &Path) -> io::Result<Arc<dyn ByteSource>> {
        Ok(self.open_file(path)?)
    }

    /// An object, by one HEAD (no directory probe: a directory is not a file).
    fn is_file(&self, path: &Path) -> bool {
        let Ok(key) = self.ctx.key_of(path) else {
            return false;
        };
        match self.by_listing(&key) {
            Some(k) => k == Some(EntryKind::File),
            None => matches!(self.head(&key), Ok(Some(_))),
        }
    }

    /// The HEADs of `paths` at once ([`EXPECT_AT_ONCE`] in flight), their answers kept.
    fn expect(&self, paths: &[PathBuf]) {
        let wanted: Vec<Key> = paths
            .iter()
            .filter_map(|p| self.ctx.key_of(p).ok())
            .filter(|k| self.by_listing(k).is_none())
            .collect();
        // Kept for the next mount of the SOURCE probed, which then asks at once.
        if let (Some(d), Some(source)) = (self.disk_cache(), self.ctx.source.get()) {
            let mut asked = lock(&self.ctx.asked);
            let before = asked.len();
            for k in &wanted {
                if asked.len() < MAX_ASKED && !asked.iter().any(|a| a == k.as_ref()) {
                    asked.push(k.as_ref().to_string());
                }
            }
            if asked.len() != before {
                d.set_asked(source, &asked);
            }
        }
        let keys: Vec<Key> = wanted
            .into_iter()
            .filter(|k| !lock(&self.ctx.heads).contains_key(k.as_ref()))
            .collect();
        for batch in keys.chunks(EXPECT_AT_ONCE) {
            std::thread::scope(|s| {
                for k in batch {
                    s.spawn(move || {
                        let _ = self.head(k);
                    });
                }
            });
        }
    }

    fn meta(&self, path: &Path) -> io::Result<FileMeta> {
        let key = self.ctx.key_of(path)?;
        let known_dir = matches!(self.by_listing(&key), Some(Some(EntryKind::Dir)));
        let stat = if known_dir {
            Some((EntryKind::Dir, None))
        } else {
            self.stat(&key)?
        };
        match stat {
            Some((_, Some(m))) => Ok(self.ctx.file_meta(Some(m.last_modified))),
            Some((_, None)) => {
                let mut m = self.ctx.file_meta(None);
                m.mode = file_type::DIR | 0o555;
                Ok(m)
            }
            None => Err(RemoteError::NotFound {
                url: self.ctx.url(&key),
            }
            .into()),
        }
    }

    /// From a HEAD of the object (opening it would fetch its first blocks).
    fn stamp(&self, path: &Path) -> io::Result<(u64, std::time::SystemTime)> {
        let key = self.ctx.key_of(path)?;
        match self.head_now(&key)? {
            Some(m) => Ok((m.size, self.ctx.file_meta(Some(m.last_modified)).mtime)),
            None => Err(RemoteError::NotFound {
                url: self.ctx.url(&key),
            }
            .into()),
        }
    }

    fn missing(&self, path: &Path) -> io::Error {
        let e = RemoteStore::missing(self, path);
        io::Error::new(io::ErrorKind::NotFound, e.to_string())
    }

    fn read_whole(&self, path: &Path, max: u64) -> io::Result<Vec<u8>> {
        self.read_whole_object(path, max).map_err(|e| match e {
            RemoteError::Unsupported { .. } => {
                io::Error::new(io::ErrorKind::InvalidData, e.to_string())
            }
            e => e.into(),
        })
    }
}
