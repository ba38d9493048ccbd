//! Live checkpoint directories: a checkpoint directory with a `checkpoint` state file is
//! followed while mounted. Its root ([`LiveDir`], subtree 0) lists one directory per checkpoint
//! the state file names and `latest`; a watcher thread re-reads the state file when the
//! directory changes (inotify, and a 1 s poll as a fallback), mounts new checkpoints (each a
//! snapshot of its files taken when it appeared), unlinks pruned ones, moves `latest`, and
//! tells the kernel which cached names and listings changed.
//!
//! A checkpoint is shown once it is complete (a copy in progress is not), or after the grace
//! (`-o live_grace`) without its files growing, as it is. One shown as it is stays watched: a
//! signature of its files (sizes and modification times, no reading) is compared at each poll,
//! and once they change it is opened again and the new one shown in its place (at once if
//! complete, else once its files stop changing for the grace). The one replaced is handled as a
//! pruned one: files open on it are still served by it (a file of it that grew since fails with
//! EIO, as any file changed under a mount), and it is freed once the kernel forgot it.
//!
//! A pruned checkpoint's subtrees are freed (files closed, memory released) once the kernel has
//! forgotten every inode of them; until then files already open keep reading what they opened.
//! Freeing gives their registry slots back, to be reused, with a new generation, by checkpoints
//! that appear later (see [`super::registry`]): a mount follows a job for as long as it runs.

use crate::sync::{lock, read_lock, write_lock};
use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant, SystemTime};

use super::{Fs, Kind};
use crate::error::{FsError, FsResult, SourceError};
use crate::formats::tensors::TensorSet;
use crate::formats::v2::checkpoint::split_prefix;
use crate::fs::build::Builder;
use crate::fs::subtree::{slice_of, Entry, NodeAttr, Size, Subtree};
use crate::namespace::ino::{cookie, Ino, ROOT};
use crate::probe::state;
use crate::source::bytes::{EntryKind, FileMeta, Store};
use crate::source::local::LocalStore;
use crate::source::watch::DirWatch;

/// Local node numbers of the live root subtree.
const ROOT_LOCAL: u64 = 1;
const LATEST_LOCAL: u64 = 2;
/// The cookie of `latest`, listed after every checkpoint.
const LATEST_COOKIE: u64 = 1 << 62;
/// How often the state file is checked when no change was signalled.
const POLL: Duration = Duration::from_secs(1);
/// Most entries the signature of a checkpoint's files visits (a directory member's tree is cut
/// there: changes past it are not seen).
const MAX_SIGNED: usize = 4096;

pub(crate) use super::Invalidate;

/// One checkpoint as mounted: its directory and the subtrees built for it.
struct Mounted {
    name: String,
    prefix: PathBuf,
    root: Ino,
    seq: u64,
    /// The registry slots of its subtrees not freed yet; while `root` is not freed, its slot
    /// comes first.
    ids: Vec<u16>,
    /// Whether the slot of `root` was freed (pruned checkpoints).
    root_freed: bool,
    /// Its tensor sets as the mount's checkpoints list them (its own, its children's): told
    /// apart from those of another checkpoint of the same name (one opened again) by identity.
    sets: Vec<Arc<dyn TensorSet>>,
}

/// Whether a checkpoint just opened is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readiness {
    /// Complete: shown.
    Complete,
    /// Not complete after the grace without growing: shown as it is, and watched.
    AsItIs,
    /// Not complete yet: waited for.
    Wait,
}

/// Sizes and modification times of a checkpoint's files (`None`: gone or unreadable), by path,
/// sorted: tells that they changed without opening them.
type Signature = Vec<(PathBuf, Option<(u64, SystemTime)>)>;

/// A checkpoint shown as it is (not complete after the grace), watched for its files to change.
struct Watched {
    /// The `seq` of its entry in the live root.
    seq: u64,
    name: String,
    prefix: PathBuf,
    /// The files its manifest names beyond its prefix's (see [`TensorSet::part_files`]).
    parts: Vec<PathBuf>,
    /// The signature of its files as the checkpoint shown was opened with them.
    files: Signature,
    /// When its files last changed, while they differ from the ones shown.
    changed: Option<Instant>,
}

#[derive(Default)]
struct DirState {
    entries: Vec<Mounted>,
    latest: Option<String>,
    next_seq: u64,
}

/// The root directory of a live checkpoint directory.
pub(crate) struct LiveDir {
    meta: FileMeta,
    state: RwLock<DirState>,
}

impl LiveDir {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, DirState> {
        read_lock(&self.state)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, DirState> {
        write_lock(&self.state)
    }
}

impl Subtree for LiveDir {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        let (kind, size) = match local {
            ROOT_LOCAL => (Kind::Dir, 0),
            LATEST_LOCAL => (
                Kind::Symlink,
                self.read().latest.as_ref().ok_or(FsError::NotFound)?.len() as u64,
            ),
            _ => return Err(FsError::NotFound),
        };
        Ok(NodeAttr {
            kind,
            size: Size::Known(size),
            meta: self.meta,
        })
    }

    fn kind(&self, local: u64) -> FsResult<Kind> {
        match local {
            ROOT_LOCAL => Ok(Kind::Dir),
            LATEST_LOCAL => Ok(Kind::Symlink),
            _ => Err(FsError::NotFound),
        }
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        if dir != ROOT_LOCAL {
            return Err(FsError::NotDir);
        }
        let st = self.read();
        if name == b"latest" {
            return st
                .latest
                .as_ref()
                .and_then(|_| Ino::new(0, LATEST_LOCAL))
                .ok_or(FsError::NotFound);
        }
        st.entries
            .iter()
            .find(|m| m.name.as_bytes() == name)
            .map(|m| m.root)
            .ok_or(FsError::NotFound)
    }

    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        match dir {
            ROOT_LOCAL => Ok(Some(ROOT)),
            _ => Err(FsError::NotDir),
        }
    }

    fn readdir(&self, dir: u64, c: u64, add: &mut dyn FnMut(Entry<'_>) -> bool) -> FsResult<()> {
        if dir != ROOT_LOCAL {
            return Err(FsError::NotDir);
        }
        // Cookies are the entries' sequence numbers, so a listing resumed after a change goes
        // on where it was.
        let after = c.saturating_sub(cookie::BASE);
        // What to list, copied out: `add` asks for attributes (READDIRPLUS), which reads this
        // state again, and a read lock taken twice by one thread waits forever once the watcher
        // is waiting to write (the std lock lets no new reader past a waiting writer).
        let (shown, latest) = {
            let st = self.read();
            let shown: Vec<(Ino, String, u64)> = st
                .entries
                .iter()
                .filter(|m| c < cookie::BASE || m.seq > after)
                .map(|m| (m.root, m.name.clone(), m.seq))
                .collect();
            (shown, st.latest.is_some())
        };
        if c < LATEST_COOKIE {
            for (root, name, seq) in &shown {
                if add(Entry {
                    ino: *root,
                    name: name.as_bytes(),
                    kind: Kind::Dir,
                    cookie: cookie::BASE + seq,
                }) {
                    return Ok(());
                }
            }
            if latest {
                if let Some(ino) = Ino::new(0, LATEST_LOCAL) {
                    add(Entry {
                        ino,
                        name: b"latest",
                        kind: Kind::Symlink,
                        cookie: LATEST_COOKIE,
                    });
                }
            }
        }
        Ok(())
    }

    fn open(&self, _local: u64) -> FsResult<()> {
        Ok(())
    }

    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Bytes> {
        match local {
            LATEST_LOCAL => Ok(slice_of(&self.readlink(local)?, offset, size)),
            _ => Err(FsError::IsDir),
        }
    }

    fn readlink(&self, local: u64) -> FsResult<Vec<u8>> {
        if local != LATEST_LOCAL {
            return Err(FsError::NotSymlink);
        }
        self.read()
            .latest
            .as_ref()
            .map(|l| l.as_bytes().to_vec())
            .ok_or(FsError::NotFound)
    }
}

/// A followed checkpoint directory.
pub(crate) struct Live {
    dir: PathBuf,
    /// The state file that lists its checkpoints; `None`: its checkpoint files are listed
    /// (a directory of Keras files, one per epoch), the newest being `latest`.
    state_file: Option<PathBuf>,
    /// Mounted with nothing in it yet: the directory's state file is followed once one
    /// appears (a TensorFlow job's first save), its files are listed until then.
    adopt_state: bool,
    /// The state file adopted (see `adopt_state`), from then on followed as `state_file` is.
    adopted: std::sync::OnceLock<PathBuf>,
    root: Arc<LiveDir>,
    /// Unlinked checkpoints not yet freed.
    pruned: Mutex<Vec<Mounted>>,
    /// Checkpoints named by the state file (or listed) but waiting for their data shards or
    /// the end of their writing: since when, and their files' bytes then (the wait starts
    /// again while they grow).
    waiting: Mutex<Vec<(String, Instant, u64)>>,
    /// Checkpoints shown as they were, watched for their files to change.
    watched: Mutex<Vec<Watched>>,
    /// The state file's size and mtime when it was last applied.
    applied: Mutex<Option<(u64, std::time::SystemTime)>>,
    /// Warnings given (each once).
    said: Mutex<Vec<String>>,
}

/// The state file's text, if it is complete: it parses, names a current checkpoint, ends with
/// a newline, and lists the current checkpoint among all of them (TensorFlow writes all of
/// this). A file caught in the middle of a write fails one of these and is retried later.
fn complete_state(
    store: &dyn Store,
    dir: &Path,
    state_file: &Path,
) -> Option<(state::NamedPrefixes, Option<String>)> {
    let text = store.read_whole(state_file, state::MAX_STATE_FILE).ok()?;
    if !text.ends_with(b"\n") {
        return None;
    }
    let st = state::parse(std::str::from_utf8(&text).ok()?).ok()?;
    if st.model_checkpoint_path.is_empty()
        || (!st.all_model_checkpoint_paths.is_empty()
            && !st
                .all_model_checkpoint_paths
                .contains(&st.model_checkpoint_path))
    {
        return None;
    }
    state::resolve(store, dir, state_file).ok()
}

/// The state file's size and mtime (through the store, as every read of the directory is).
fn stamp(store: &dyn Store, path: &Path) -> Option<(u64, std::time::SystemTime)> {
    store.stamp(path).ok()
}

impl Live {
    /// Mounts the checkpoints the state file names now (without one: the checkpoint files in
    /// the directory). Registers the live root as subtree 0.
    pub(crate) fn open(
        fs: &Fs,
        store: &dyn Store,
        dir: &Path,
        state_file: Option<&Path>,
    ) -> Result<Live, SourceError> {
        let meta = store.meta(dir).map_err(|err| SourceError::Io {
            path: dir.to_path_buf(),
            err,
        })?;
        let id = fs.registry.reserve();
        if id != Some(0) {
            return Err(SourceError::Invalid {
                path: dir.to_path_buf(),
                msg: "the live root must be the first subtree".into(),
            });
        }
        let root = Arc::new(LiveDir {
            meta,
            state: RwLock::new(DirState::default()),
        });
        fs.registry.set(0, root.clone());
        let mut live = Live {
            dir: dir.to_path_buf(),
            state_file: state_file.map(Path::to_path_buf),
            adopt_state: false,
            adopted: std::sync::OnceLock::new(),
            root,
            pruned: Mutex::new(Vec::new()),
            waiting: Mutex::new(Vec::new()),
            watched: Mutex::new(Vec::new()),
            applied: Mutex::new(None),
            said: Mutex::new(Vec::new()),
        };
        // At mount, the state file must be usable (as for a snapshot mount).
        let (checkpoints, mut latest) = match state_file {
            Some(f) => state::resolve(store, dir, f)?,
            None => (state::checkpoint_files(store, dir)?, None),
        };
        if checkpoints.is_empty() && state_file.is_some() {
            return Err(SourceError::Invalid {
                path: state_file.unwrap_or(dir).to_path_buf(),
                msg: "none of the checkpoints this state file lists exists".into(),
            });
        }
        // Nothing in it yet (a training job that has not saved): mounted empty, and the
        // state file its first save writes is followed.
        live.adopt_state = state_file.is_none() && checkpoints.is_empty();
        let mut first_error = None;
        for (name, prefix) in &checkpoints {
            let before = live.signature_before_open(fs, store, name, prefix);
            match live.mount_one(fs, store, name, prefix) {
                // A checkpoint not complete yet (a copy under way, a file still being written)
                // is left to the watcher, which shows it once it is complete or after the
                // grace, as it does new ones: also one the state file names (a mount made
                // during a copy does not show a half-copied shard).
                Ok(m) => match live.ready(fs, &m) {
                    Readiness::Wait => {
                        log::info!(
                            "{}: {} {name} is not complete yet; shown once it is, or after {:?} without its files growing",
                            dir.display(),
                            member_kind(prefix),
                            fs.opts.live_grace
                        );
                        live.unmount(fs, m)
                    }
                    r => live.show(store, m, r, before),
                },
                Err(e) if state_file.is_none() => {
                    log::warn!("{}: checkpoint {name}: {e}; retried", dir.display());
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        if state_file.is_none() {
            // Nothing complete yet (the first file still being written): mounted empty and
            // followed; said on stderr too, as the mount is made.
            if live.root.read().entries.is_empty() && first_error.is_some() {
                log::warn!(
                    "{}: no checkpoint in it opens yet; mounted empty, each checkpoint shown once it is complete",
                    dir.display()
                );
            }
            latest = live.newest_shown(store);
        } else {
            let named = latest.clone();
            latest = live.shown_latest(latest, &checkpoints);
            if let Some(n) = named.filter(|n| latest.as_ref() != Some(n)) {
                log::warn!(
                    "{}: the current checkpoint {n} is not complete yet; latest is {} until it is",
                    dir.display(),
                    latest.as_deref().unwrap_or("absent")
                );
            }
        }
        live.root.write().latest = latest;
        *lock(&live.applied) = state_file.and_then(|f| stamp(store, f));
        Ok(live)
    }

    /// The checkpoints and `latest` now, if the directory's state is complete: the state
    /// file's (see [`complete_state`]), or the checkpoint files in it (`latest`: see
    /// [`Live::newest_shown`]).
    fn current(&self, store: &dyn Store) -> Option<(state::NamedPrefixes, Option<String>)> {
        match self.state_file(store) {
            Some(f) => complete_state(store, &self.dir, f),
            None => Some((state::checkpoint_files(store, &self.dir).ok()?, None)),
        }
    }

    /// The state file followed: the one mounted with, or the one adopted (see
    /// [`Live::adopt_state`]) once it exists.
    fn state_file(&self, store: &dyn Store) -> Option<&Path> {
        if let Some(f) = &self.state_file {
            return Some(f);
        }
        if let Some(f) = self.adopted.get() {
            return Some(f);
        }
        let f = self.dir.join("checkpoint");
        if self.adopt_state && store.is_file(&f) {
            log::info!(
                "{}: its state file appeared; following it",
                self.dir.display()
            );
            return Some(self.adopted.get_or_init(|| f));
        }
        None
    }

    /// `latest` with a state file: the checkpoint it names current (`latest`) if shown, else
    /// the newest shown of those it lists (the last in its order), else none: `latest` never
    /// names a checkpoint not shown (one still being copied).
    fn shown_latest(
        &self,
        latest: Option<String>,
        checkpoints: &state::NamedPrefixes,
    ) -> Option<String> {
        let st = self.root.read();
        let shown = |n: &str| st.entries.iter().any(|m| m.name == n);
        latest.filter(|l| shown(l)).or_else(|| {
            checkpoints
                .iter()
                .rev()
                .find(|(n, _)| shown(n))
                .map(|(n, _)| n.clone())
        })
    }

    /// `latest` without a state file: the newest checkpoint file among those shown (not one
    /// still being written).
    fn newest_shown(&self, store: &dyn Store) -> Option<String> {
        let shown: state::NamedPrefixes = self
            .root
            .read()
            .entries
            .iter()
            .map(|m| (m.name.clone(), m.prefix.clone()))
            .collect();
        state::newest_file(store, &shown)
    }

    fn mount_one(
        &self,
        fs: &Fs,
        store: &dyn Store,
        name: &str,
        prefix: &Path,
    ) -> Result<Mounted, SourceError> {
        let id = fs.registry.reserve().ok_or_else(|| SourceError::Invalid {
            path: prefix.to_path_buf(),
            msg: format!(
                "more than {} subtrees at once (two per checkpoint shown or still open, one more \
                 per meta graph)",
                crate::namespace::ino::MAX_SUBTREES - 1
            ),
        })?;
        let mut b = Builder::new(fs, store, id);
        if let Err(e) = b.build_checkpoint(name, prefix) {
            // Nothing of it was shown: its slots are given back at once.
            forget_sets(fs, &b.sets);
            for &id in &b.ids {
                fs.registry.release(id);
            }
            return Err(e);
        }
        let ids = b.ids.clone();
        let sets = std::mem::take(&mut b.sets);
        fs.registry.set(id, Arc::new(b.finish()));
        Ok(Mounted {
            name: name.to_string(),
            prefix: prefix.to_path_buf(),
            root: Ino::new(id, 1).unwrap_or(ROOT),
            seq: 0,
            ids,
            root_freed: false,
            sets,
        })
    }

    /// Lists `m` in the live root. One shown as it is ([`Readiness::AsItIs`]) is watched
    /// ([`Live::reopen_changed`]) from `before`, the signature of its files taken before it was
    /// opened (see [`Live::signature_before_open`]), so that a change made while it was being
    /// opened counts as one.
    fn show(&self, store: &dyn Store, m: Mounted, r: Readiness, before: Option<Signature>) {
        let watch = (r == Readiness::AsItIs).then(|| {
            let parts = part_files(&m.sets);
            // `before` is taken whenever an open may show it as it is; were it not, taken now.
            let mut files = before.unwrap_or_else(|| signature(store, &m.prefix, &[]));
            add_parts(store, &mut files, &parts);
            (m.name.clone(), m.prefix.clone(), parts, files)
        });
        let seq = self.root.write().push(m);
        if let Some((name, prefix, parts, files)) = watch {
            lock(&self.watched).push(Watched {
                seq,
                name,
                prefix,
                parts,
                files,
                changed: None,
            });
        }
    }

    /// The signature of the files of checkpoint `name` now, if it may be shown as it is once
    /// opened (it was found incomplete before, or there is no grace); `None` otherwise, which
    /// spares a complete checkpoint the listing.
    fn signature_before_open(
        &self,
        fs: &Fs,
        store: &dyn Store,
        name: &str,
        prefix: &Path,
    ) -> Option<Signature> {
        let waited =
            fs.opts.live_grace.is_zero() || lock(&self.waiting).iter().any(|(n, _, _)| n == name);
        waited.then(|| signature(store, prefix, &[]))
    }

    /// Opens again each checkpoint shown as it was whose files changed since, and shows the new
    /// one in its place: at once if it is complete (it is then no longer watched), else once
    /// its files have not changed for the grace (as a new checkpoint waits), as it is, and
    /// still watched. While its files do not change, a watched checkpoint costs the signature
    /// of its files per poll, nothing more; one that changed and no longer opens is retried
    /// until the grace has passed, then at its next change.
    fn reopen_changed(&self, fs: &Fs, store: &dyn Store, out: &mut Vec<Invalidate>) {
        let grace = fs.opts.live_grace;
        let watched = std::mem::take(&mut *lock(&self.watched));
        let mut keep = Vec::with_capacity(watched.len());
        for mut w in watched {
            let files = signature(store, &w.prefix, &w.parts);
            if files != w.files {
                w.files = files;
                w.changed = Some(Instant::now());
            }
            let Some(changed) = w.changed else {
                keep.push(w);
                continue;
            };
            let m = match self.mount_one(fs, store, &w.name, &w.prefix) {
                Ok(m) => m,
                Err(e) => {
                    self.warn_once(format!(
                        "{}: checkpoint {}: changed, and does not open again: {e}; the one shown is kept",
                        self.dir.display(),
                        w.name
                    ));
                    if changed.elapsed() >= grace {
                        w.changed = None;
                    }
                    keep.push(w);
                    continue;
                }
            };
            let complete = m.sets.iter().all(|s| s.complete());
            if !complete && changed.elapsed() < grace {
                // Still changing: waited for, as a new checkpoint is.
                self.unmount(fs, m);
                keep.push(w);
                continue;
            }
            let parts = part_files(&m.sets);
            if !self.replace(fs, w.seq, m, out) {
                // Pruned meanwhile: nothing left to watch.
                continue;
            }
            log::info!(
                "{}: {} {} changed since it was shown as it is; shown anew{}",
                self.dir.display(),
                member_kind(&w.prefix),
                w.name,
                if complete {
                    ", complete"
                } else {
                    ", still as it is"
                }
            );
            if !complete {
                add_parts(store, &mut w.files, &parts);
                w.parts = parts;
                w.changed = None;
                keep.push(w);
            }
        }
        lock(&self.watched).extend(keep);
    }

    /// Shows `new` in place of the entry `seq` (the same name, at the same place in the
    /// listing, so a listing resumed goes on as before); the one replaced is handled as a
    /// pruned one (still serving the inodes the kernel holds of it; freed once forgotten).
    /// False, and `new` dropped, if there is no entry `seq` any more.
    fn replace(&self, fs: &Fs, seq: u64, mut new: Mounted, out: &mut Vec<Invalidate>) -> bool {
        let old = {
            let mut st = self.root.write();
            match st.entries.iter_mut().find(|m| m.seq == seq) {
                Some(slot) => {
                    new.seq = seq;
                    Some(std::mem::replace(slot, new))
                }
                None => {
                    drop(st);
                    self.unmount(fs, new);
                    None
                }
            }
        };
        let Some(old) = old else {
            return false;
        };
        self.retire(fs, old, out);
        true
    }

    /// A checkpoint no longer listed (pruned, or replaced by one opened again): the kernel is
    /// told to forget its name, its sets leave the mount's checkpoints, and it is kept until
    /// the kernel has forgotten its inodes ([`Live::free_forgotten`]).
    fn retire(&self, fs: &Fs, m: Mounted, out: &mut Vec<Invalidate>) {
        out.push(Invalidate::Entry {
            parent: ROOT.0,
            name: m.name.as_bytes().to_vec(),
        });
        forget_sets(fs, &m.sets);
        lock(&self.pruned).push(m);
    }

    /// Applies the state file if it changed, and opens again the checkpoints shown as they were
    /// whose files changed; returns what the kernel must forget.
    pub(crate) fn refresh(&self, fs: &Fs, store: &dyn Store, force: bool) -> Vec<Invalidate> {
        let mut out = Vec::new();
        self.free_forgotten(fs);
        // Without a state file there is no one file to watch: the directory is listed again.
        let now_stamp = self.state_file(store).and_then(|f| stamp(store, f));
        if force || !self.settled(now_stamp) {
            self.apply(fs, store, now_stamp, &mut out);
        }
        self.reopen_changed(fs, store, &mut out);
        if !out.is_empty() {
            out.push(Invalidate::Inode(ROOT.0));
        }
        self.free_forgotten(fs);
        out
    }

    /// Applies the directory's state now: mounts new checkpoints, unlinks pruned ones, moves
    /// `latest`. A missing or half-written state file keeps the last complete state.
    fn apply(
        &self,
        fs: &Fs,
        store: &dyn Store,
        now_stamp: Option<(u64, SystemTime)>,
        out: &mut Vec<Invalidate>,
    ) {
        let Some((checkpoints, latest)) = self.current(store) else {
            return;
        };
        // A checkpoint no longer named is no longer waited for.
        lock(&self.waiting).retain(|(n, _, _)| checkpoints.iter().any(|(c, _)| c == n));
        let all_ready = self.mount_new(fs, store, &checkpoints, out);
        self.prune_gone(fs, &checkpoints, out);
        let latest = match self.state_file(store) {
            Some(_) => self.shown_latest(latest, &checkpoints),
            None => self.newest_shown(store),
        };
        self.move_latest(latest, out);
        if all_ready {
            *lock(&self.applied) = now_stamp;
        }
    }

    /// Whether there is nothing to apply: the state file is as stamped when last applied
    /// (`now_stamp`; none without a state file: never settled) and no checkpoint is waiting.
    fn settled(&self, now_stamp: Option<(u64, SystemTime)>) -> bool {
        let waiting_any = !lock(&self.waiting).is_empty();
        let unchanged = now_stamp.is_some() && *lock(&self.applied) == now_stamp;
        unchanged && !waiting_any
    }

    /// Mounts the checkpoints of `checkpoints` not shown yet, each once it is complete;
    /// whether all of them are (none left waiting or failing to open).
    fn mount_new(
        &self,
        fs: &Fs,
        store: &dyn Store,
        checkpoints: &state::NamedPrefixes,
        out: &mut Vec<Invalidate>,
    ) -> bool {
        let known: Vec<String> = self
            .root
            .read()
            .entries
            .iter()
            .map(|m| m.name.clone())
            .collect();
        let mut all_ready = true;
        for (name, prefix) in checkpoints {
            if known.contains(name) {
                continue;
            }
            let before = self.signature_before_open(fs, store, name, prefix);
            match self.mount_one(fs, store, name, prefix) {
                Ok(m) => {
                    let r = self.ready(fs, &m);
                    if r == Readiness::Wait {
                        all_ready = false;
                        self.unmount(fs, m);
                        continue;
                    }
                    log::info!(
                        "{}: {} {name} appeared",
                        self.dir.display(),
                        member_kind(prefix)
                    );
                    self.show(store, m, r, before);
                    out.push(Invalidate::Entry {
                        parent: ROOT.0,
                        name: name.as_bytes().to_vec(),
                    });
                }
                Err(e) => {
                    all_ready = false;
                    // Said once per checkpoint and error: a file being written is retried at
                    // every change until it opens.
                    self.warn_once(format!(
                        "{}: checkpoint {name}: {e}; retried",
                        self.dir.display()
                    ));
                }
            }
        }
        all_ready
    }

    /// Logs `msg` unless it was said before (of the last 1024 said).
    fn warn_once(&self, msg: String) {
        let mut said = lock(&self.said);
        if !said.contains(&msg) {
            log::warn!("{msg}");
            if said.len() >= 1024 {
                said.clear();
            }
            said.push(msg);
        }
    }

    /// Unlinks the checkpoints shown that `checkpoints` no longer names; they are freed once
    /// forgotten ([`Live::free_forgotten`]).
    fn prune_gone(&self, fs: &Fs, checkpoints: &state::NamedPrefixes, out: &mut Vec<Invalidate>) {
        let gone: Vec<Mounted> = {
            let mut st = self.root.write();
            let (keep, gone) = std::mem::take(&mut st.entries)
                .into_iter()
                .partition(|m| checkpoints.iter().any(|(n, _)| *n == m.name));
            st.entries = keep;
            gone
        };
        for m in gone {
            log::info!(
                "{}: {} {} pruned",
                self.dir.display(),
                member_kind(&m.prefix),
                m.name
            );
            lock(&self.watched).retain(|w| w.seq != m.seq);
            self.retire(fs, m, out);
        }
    }

    /// Points `latest` at `latest`, if it moved.
    fn move_latest(&self, latest: Option<String>, out: &mut Vec<Invalidate>) {
        let latest_changed = {
            let mut st = self.root.write();
            let changed = st.latest != latest;
            st.latest = latest;
            changed
        };
        if latest_changed {
            out.push(Invalidate::Entry {
                parent: ROOT.0,
                name: b"latest".to_vec(),
            });
            if let Some(l) = Ino::new(0, LATEST_LOCAL) {
                out.push(Invalidate::Inode(l.0));
            }
        }
    }

    /// Whether a checkpoint just opened is shown: complete (its data shards all there, a Keras
    /// file written to its end: see `TensorSet::complete`), or waited for long enough without
    /// its files growing (shown as it is), or not yet.
    fn ready(&self, fs: &Fs, m: &Mounted) -> Readiness {
        let name = m.name.as_str();
        let complete = m.sets.iter().all(|c| c.complete());
        let mut waiting = lock(&self.waiting);
        if complete {
            waiting.retain(|(n, _, _)| n != name);
            return Readiness::Complete;
        }
        let bytes: u64 = m.sets.iter().map(|c| c.source_bytes()).sum();
        let since = match waiting.iter_mut().find(|(n, _, _)| n == name) {
            Some((_, t, b)) => {
                if *b != bytes {
                    // Still being written or copied: the wait starts again.
                    *t = Instant::now();
                    *b = bytes;
                }
                *t
            }
            None => {
                waiting.push((name.to_string(), Instant::now(), bytes));
                Instant::now()
            }
        };
        // How long a checkpoint that is not complete yet (data shards missing, a Keras file not
        // written to its end) is waited for, counted from when its files last grew, before it
        // is mounted anyway (its missing parts then fail with EIO): `-o live_grace`.
        let grace = fs.opts.live_grace;
        if since.elapsed() >= grace {
            log::warn!(
                "{}: checkpoint {name} is still incomplete (missing data shards, or a file \
                 shorter or longer than it says) after {:?} without growing; mounted as it is, \
                 and opened again once its files change",
                self.dir.display(),
                grace
            );
            waiting.retain(|(n, _, _)| n != name);
            return Readiness::AsItIs;
        }
        log::debug!("{}: waiting for its data shards", m.prefix.display());
        Readiness::Wait
    }

    /// Drops a checkpoint that was built but not shown (the kernel never saw its inodes).
    fn unmount(&self, fs: &Fs, m: Mounted) {
        forget_sets(fs, &m.sets);
        for &id in &m.ids {
            fs.registry.release(id);
        }
    }

    /// Frees the pruned checkpoints whose inodes the kernel has all forgotten, and gives their
    /// slots back. The slot of a checkpoint's root goes first, once no slot of it is looked
    /// up: the root is the only way in from outside (the live root no longer lists it, but a
    /// lookup resolved before the prune may still be answering, and is refused once the slot
    /// is freed), so after it nothing can reach the other slots anew. Each of those is freed
    /// when its own lookups are forgotten.
    fn free_forgotten(&self, fs: &Fs) {
        let mut pruned = lock(&self.pruned);
        pruned.retain_mut(|m| {
            if !m.root_freed {
                if m.ids.iter().any(|&id| fs.registry.lookups(id) > 0) {
                    return true;
                }
                let Some(&root) = m.ids.first() else {
                    return false;
                };
                if !fs.registry.release(root) {
                    return true;
                }
                m.root_freed = true;
                m.ids.remove(0);
            }
            m.ids.retain(|&id| !fs.registry.release(id));
            if !m.ids.is_empty() {
                return true;
            }
            log::debug!("{}: freed", m.prefix.display());
            false
        });
    }

    /// Number of pruned checkpoints not yet freed (for tests and logs).
    #[cfg(test)]
    pub(crate) fn pending_free(&self) -> usize {
        lock(&self.pruned).len()
    }
}

impl DirState {
    /// Lists `m` last; its sequence number.
    fn push(&mut self, mut m: Mounted) -> u64 {
        self.next_seq += 1;
        m.seq = self.next_seq;
        self.entries.push(m);
        self.next_seq
    }
}

/// Takes `sets` out of the mount's checkpoints, by identity (a checkpoint opened again has the
/// same name as the one it replaces).
fn forget_sets(fs: &Fs, sets: &[Arc<dyn TensorSet>]) {
    if sets.is_empty() {
        return;
    }
    write_lock(&fs.checkpoints).retain(|(_, c)| !sets.iter().any(|s| Arc::ptr_eq(s, c)));
}

/// The files the manifests of `sets` name (see [`TensorSet::part_files`]).
fn part_files(sets: &[Arc<dyn TensorSet>]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = sets.iter().flat_map(|s| s.part_files()).collect();
    out.sort();
    out.dedup();
    out.truncate(MAX_SIGNED);
    out
}

/// The signature of the files of the checkpoint at `prefix` (see [`Signature`]), through the
/// store, each file's size and time only: the files its prefix names (`P` itself: a Keras
/// file, a V1 checkpoint; `P.index`, `P.data-*`, and any other `P.*`), every file in its
/// directory where it is a directory's (an Orbax step's `_CHECKPOINT_METADATA`, a TF Serving
/// version's `saved_model.pb`), and `parts` (files its manifest names). A file appearing or
/// going changes it too.
fn signature(store: &dyn Store, prefix: &Path, parts: &[PathBuf]) -> Signature {
    let mut paths: Vec<PathBuf> = Vec::new();
    let (dir, base) = split_prefix(prefix);
    if let Ok(mut entries) = store.list(dir) {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (n, kind) in entries {
            if paths.len() >= MAX_SIGNED {
                break;
            }
            if kind == EntryKind::File && named_by(&n, base) {
                paths.push(dir.join(n));
            }
        }
    }
    if let Some(member) = member_dir(prefix) {
        tree_files(store, member, &mut paths);
    }
    paths.sort();
    paths.dedup();
    let mut files: Signature = paths.into_iter().map(|p| (p, None)).collect();
    for (p, st) in &mut files {
        *st = store.stamp(p).ok();
    }
    add_parts(store, &mut files, parts);
    files
}

/// Adds to `files` each of `parts` not in it yet, with its size and time now.
fn add_parts(store: &dyn Store, files: &mut Signature, parts: &[PathBuf]) {
    let mut added = false;
    for p in parts {
        if !files.iter().any(|(f, _)| f == p) {
            files.push((p.clone(), store.stamp(p).ok()));
            added = true;
        }
    }
    if added {
        files.sort();
    }
}

/// Whether file name `n` is one a prefix of base name `base` names: `base` itself or `base.*`
/// (for the empty base name of a `dir/` prefix: `.index`, `.data-*`).
fn named_by(n: &std::ffi::OsStr, base: &std::ffi::OsStr) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (n, base) = (n.as_bytes(), base.as_bytes());
    n == base || (n.starts_with(base) && n.get(base.len()) == Some(&b'.'))
}

/// The directory a checkpoint is, where its path is a file in it: an Orbax step (its
/// `_CHECKPOINT_METADATA`) or a TF Serving version (its `saved_model.pb`).
fn member_dir(path: &Path) -> Option<&Path> {
    if let Some(v) = crate::probe::serving::version_dir(path) {
        return Some(v);
    }
    let orbax = path
        .file_name()
        .is_some_and(|f| f == crate::formats::orbax::CHECKPOINT_METADATA);
    orbax.then(|| path.parent()).flatten()
}

/// Adds the files under `root` to `out`, each directory's in name order, until [`MAX_SIGNED`]
/// entries were visited (directories count: a tree of directories alone, or one looping
/// through symlinks, ends there too).
fn tree_files(store: &dyn Store, root: &Path, out: &mut Vec<PathBuf>) {
    let mut visited = 0usize;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        let Ok(mut entries) = store.list(&d) else {
            continue;
        };
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (n, kind) in entries {
            visited += 1;
            if visited > MAX_SIGNED {
                return;
            }
            match kind {
                EntryKind::File => out.push(d.join(n)),
                EntryKind::Dir => dirs.push(d.join(n)),
                EntryKind::Other => {}
            }
        }
    }
}

/// Follows `fs`'s live directory in a thread until `fs` is dropped, calling `notify` with what
/// the kernel must forget after each change.
pub(crate) fn follow(fs: &Arc<Fs>, notify: Box<dyn Fn(Invalidate) + Send>) -> std::io::Result<()> {
    let Some(live) = &fs.live else {
        return Ok(());
    };
    let watch = DirWatch::new(&live.dir)?;
    let weak: Weak<Fs> = Arc::downgrade(fs);
    std::thread::Builder::new()
        .name("live".into())
        .spawn(move || loop {
            let changed = match watch.wait(POLL) {
                Ok(c) => c,
                Err(e) => {
                    log::warn!("watching the checkpoint directory: {e}");
                    std::thread::sleep(POLL);
                    false
                }
            };
            let Some(fs) = weak.upgrade() else {
                return;
            };
            let Some(live) = &fs.live else {
                return;
            };
            for inv in live.refresh(&fs, &LocalStore, changed) {
                notify(inv);
            }
        })?;
    Ok(())
}

/// What a member of a followed directory is called in its log lines: a TF Serving base
/// directory's are versions (their path a version's `saved_model.pb`), others checkpoints.
fn member_kind(path: &std::path::Path) -> &'static str {
    if crate::probe::serving::version_dir(path).is_some() {
        "version"
    } else {
        "checkpoint"
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::error::FsError;
    use crate::fs::{Fs, Options, ROOT};
    use crate::namespace::ino::Ino;
    use crate::parse::dtype::DType;
    use crate::testkit::writer::CheckpointWriter;

    fn bytes(v: f32) -> Vec<u8> {
        [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// Saves `ckpt-i` (4 floats of value `i`), names it and the one before in the state file,
    /// and deletes the one before that (`max_to_keep=2`).
    fn save(dir: &Path, i: usize) {
        let mut w = CheckpointWriter::new(dir.join(format!("ckpt-{i}")), 1).expect("writer");
        w.add(b"v", DType(1), &[4], &bytes(i as f32), 0)
            .expect("add");
        w.finish().expect("finish");
        let mut state = format!("model_checkpoint_path: \"ckpt-{i}\"\n");
        for n in i.saturating_sub(1)..=i {
            state.push_str(&format!("all_model_checkpoint_paths: \"ckpt-{n}\"\n"));
        }
        std::fs::write(dir.join("checkpoint"), state).expect("state");
        if i >= 2 {
            for f in ["index", "data-00000-of-00001"] {
                std::fs::remove_file(dir.join(format!("ckpt-{}.{f}", i - 2))).expect("rm");
            }
        }
    }

    /// The kernel's side: a lookup whose entry is handed out (and counted).
    fn lookup(fs: &Fs, parent: u64, name: &str) -> crate::fs::Attr {
        let a = fs.lookup(parent, name.as_bytes()).expect(name);
        assert!(fs.looked_up(a.ino, a.generation), "{name} handed out");
        a
    }

    /// A listing's callback asks for each entry's attributes (READDIRPLUS), `latest`'s among
    /// them, while the watcher may be waiting to apply a change: the listing holds no lock
    /// while it calls back, or the two wait for each other forever (seen in
    /// `tests/mount/live.rs`: a mount whose listing never returned).
    #[test]
    fn a_listing_does_not_wait_for_the_watcher() {
        let tmp = tempfile::tempdir().expect("tmp");
        save(tmp.path(), 0);
        let probed = crate::probe::probe(tmp.path()).expect("probe");
        let fs = std::sync::Arc::new(Fs::new(&probed, &Options::default()).expect("mount"));
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let f = fs.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            let r = f.readdir_plus(ROOT, 0, |_, _| {
                // A writer arrives while the listing is under way (a change applied).
                let live = f.live.as_ref().expect("live");
                let root = live.root.clone();
                let writer = std::thread::spawn(move || drop(root.write()));
                std::thread::sleep(std::time::Duration::from_millis(20));
                let _ = crate::fs::subtree::Subtree::attr(&*live.root, super::LATEST_LOCAL);
                writer.join().expect("writer");
                n += 1;
                false
            });
            let _ = done_tx.send((r.is_ok(), n));
        });
        let (ok, n) = done_rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the listing finished (no deadlock)");
        assert!(ok && n >= 3, "listed {n} entries");
    }

    /// `ckpt-0` of two tensors (`a`, then `b`, 4 floats each) in `dir`, its data shard cut to
    /// its first `keep` bytes; the whole shard.
    fn save_cut(dir: &Path, keep: usize) -> Vec<u8> {
        let mut w = CheckpointWriter::new(dir.join("ckpt-0"), 1).expect("writer");
        for (k, v) in [(b"a", 1.0), (b"b", 2.0)] {
            w.add(k, DType(1), &[4], &bytes(v), 0).expect("add");
        }
        w.finish().expect("finish");
        std::fs::write(
            dir.join("checkpoint"),
            "model_checkpoint_path: \"ckpt-0\"\nall_model_checkpoint_paths: \"ckpt-0\"\n",
        )
        .expect("state");
        let data = dir.join("ckpt-0.data-00000-of-00001");
        let whole = std::fs::read(&data).expect("data");
        std::fs::write(&data, &whole[..keep]).expect("cut");
        whole
    }

    /// A checkpoint shown as it is (a grace of 0) is opened again once its files change, and
    /// shown in place of the one shown before: the mount's checkpoints list the new one only
    /// (the two have one name), inodes the kernel holds of the old one are still answered by
    /// it, and the old one is freed once forgotten. Complete, it is no longer watched.
    #[test]
    fn a_checkpoint_shown_as_it_is_is_replaced_once_its_files_change() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        let whole = save_cut(dir, 20);
        let probed = crate::probe::probe(dir).expect("probe");
        let opts = Options {
            live_grace: std::time::Duration::ZERO,
            ..Options::default()
        };
        let fs = Fs::new(&probed, &opts).expect("mount");
        let live = fs.live.as_ref().expect("live");
        let root = lookup(&fs, ROOT, "ckpt-0");
        let vars = lookup(&fs, root.ino, "variables");
        let a = lookup(&fs, vars.ino, "a.bin");
        let b = lookup(&fs, vars.ino, "b.bin");
        assert_eq!(fs.read(a.ino, 0, 64).expect("a is whole"), bytes(1.0));
        assert!(fs.read(b.ino, 0, 64).is_err(), "b is cut");
        assert_eq!(live.watched.lock().expect("watched").len(), 1);
        // Unchanged: nothing happens.
        assert!(fs.refresh_live().is_empty());
        // The rest appended (a copy going on).
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("ckpt-0.data-00000-of-00001"))
            .expect("open");
        std::io::Write::write_all(&mut f, &whole[20..]).expect("rest");
        drop(f);
        let inv = fs.refresh_live();
        assert!(
            inv.contains(&super::Invalidate::Entry {
                parent: ROOT,
                name: b"ckpt-0".to_vec()
            }),
            "{inv:?}"
        );
        let sets = fs.checkpoints();
        assert_eq!(sets.len(), 1, "one checkpoint listed");
        assert!(sets[0].1.complete(), "the new one");
        assert!(live.watched.lock().expect("watched").is_empty());
        let root2 = lookup(&fs, ROOT, "ckpt-0");
        assert_ne!(root2.ino, root.ino);
        let vars2 = lookup(&fs, root2.ino, "variables");
        let b2 = lookup(&fs, vars2.ino, "b.bin");
        assert_eq!(fs.read(b2.ino, 0, 64).expect("b is whole"), bytes(2.0));
        // The one replaced keeps answering the inodes the kernel holds, until forgotten (its
        // shard, changed since it was opened, fails its reads: integrity.md, "Reliability").
        assert_eq!(live.pending_free(), 1);
        assert!(fs.getattr(a.ino).is_ok(), "still held");
        for i in [a, b, vars, root] {
            fs.forget(i.ino, 1);
        }
        fs.refresh_live();
        assert_eq!(live.pending_free(), 0, "freed once forgotten");
        assert!(matches!(fs.getattr(a.ino), Err(FsError::NotFound)));
        assert_eq!(fs.read(b2.ino, 0, 64).expect("the new one"), bytes(2.0));
    }

    /// A pruned checkpoint keeps serving while the kernel holds its inodes; once they are
    /// forgotten its slots are freed (its inodes answer ENOENT and its entries are refused),
    /// and checkpoints saved later take them again, with the next generation.
    #[test]
    fn pruned_checkpoints_slots_are_reused_once_forgotten() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path();
        save(dir, 0);
        let probed = crate::probe::probe(dir).expect("probe");
        let fs = Fs::new(&probed, &Options::default()).expect("mount");
        let root = lookup(&fs, ROOT, "ckpt-0");
        let vars = lookup(&fs, root.ino, "variables");
        let v = lookup(&fs, vars.ino, "v.bin");
        // An entry resolved now, handed out only after the slot is freed.
        let late = fs.lookup(ROOT, b"ckpt-0").expect("ckpt-0");
        for i in 1..=2 {
            save(dir, i);
            fs.refresh_live();
        }
        assert!(matches!(fs.lookup(ROOT, b"ckpt-0"), Err(FsError::NotFound)));
        assert_eq!(fs.read(v.ino, 0, 64).expect("still held"), bytes(0.0));
        // Forgetting some of it frees nothing.
        fs.forget(v.ino, 1);
        fs.forget(vars.ino, 1);
        fs.refresh_live();
        assert_eq!(fs.read(v.ino, 0, 64).expect("still held"), bytes(0.0));
        fs.forget(root.ino, 1);
        fs.refresh_live();
        assert!(matches!(fs.getattr(v.ino), Err(FsError::NotFound)));
        assert!(matches!(fs.getattr(root.ino), Err(FsError::NotFound)));
        assert!(
            !fs.looked_up(late.ino, late.generation),
            "an entry resolved before the free is refused"
        );
        // Every later save is shown; the freed slots come round again after the never-used
        // ones, with the next generation.
        let (root_slot, var_slot) = (Ino(root.ino).subtree(), Ino(v.ino).subtree());
        let v_gen = v.generation;
        let mut reused = 0;
        for i in 3..=2 * crate::namespace::ino::MAX_SUBTREES {
            save(dir, i);
            fs.refresh_live();
            let name = format!("ckpt-{i}");
            let r = fs.lookup(ROOT, name.as_bytes()).expect(&name);
            let vars = fs.lookup(r.ino, b"variables").expect("variables");
            let v = fs.lookup(vars.ino, b"v.bin").expect("v.bin");
            assert_eq!(fs.read(v.ino, 0, 64).expect("read"), bytes(i as f32));
            for a in [r, vars, v] {
                let slot = Ino(a.ino).subtree();
                let was = if slot == root_slot {
                    root.generation
                } else if slot == var_slot {
                    v_gen
                } else {
                    continue;
                };
                assert_eq!(a.generation, was + 1, "{name}");
                reused += 1;
            }
            if reused >= 2 {
                // Both slots of ckpt-0 hold a later checkpoint's subtrees: the stale entry is
                // still refused, the new ones are handed out.
                assert!(!fs.looked_up(late.ino, late.generation));
                assert!(fs.looked_up(r.ino, r.generation));
                return;
            }
        }
        panic!("the slots of ckpt-0 were not reused");
    }
}
