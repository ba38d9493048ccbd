//! Live checkpoint directories: a checkpoint directory with a `checkpoint` state file is
//! followed while mounted. Its root ([`LiveDir`], subtree 0) lists one directory per checkpoint
//! the state file names and `latest`; a watcher thread re-reads the state file when the
//! directory changes (inotify, and a 1 s poll as a fallback), mounts new checkpoints (each a
//! snapshot of its files taken when it appeared), unlinks pruned ones, moves `latest`, and
//! tells the kernel which cached names and listings changed.
//!
//! A pruned checkpoint's subtrees are freed (files closed, memory released) once the kernel has
//! forgotten every inode of them; until then files already open keep reading what they opened.
//! Freeing gives their registry slots back, to be reused, with a new generation, by checkpoints
//! that appear later (see [`super::registry`]): a mount follows a job for as long as it runs.

use bytes::Bytes;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use super::{Fs, Kind};
use crate::error::{FsError, FsResult, SourceError};
use crate::fs::build::Builder;
use crate::fs::subtree::{slice_of, Entry, NodeAttr, Size, Subtree};
use crate::probe::state;
use crate::source::bytes::{FileMeta, Store};
use crate::source::local::LocalStore;
use crate::source::watch::DirWatch;
use crate::tree::ino::{cookie, Ino, ROOT};

/// Local node numbers of the live root subtree.
const ROOT_LOCAL: u64 = 1;
const LATEST_LOCAL: u64 = 2;
/// The cookie of `latest`, listed after every checkpoint.
const LATEST_COOKIE: u64 = 1 << 62;
/// How often the state file is checked when no change was signalled.
const POLL: Duration = Duration::from_secs(1);

/// What the kernel must forget after a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invalidate {
    /// The name `name` in directory `parent`.
    Entry { parent: u64, name: Vec<u8> },
    /// The cached attributes and contents (a directory's listing, a symlink's target).
    Inode(u64),
}

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
        self.state.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, DirState> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
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
pub struct Live {
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
    pub fn open(
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
            match live.mount_one(fs, store, name, prefix) {
                Ok(m) if state_file.is_some() || live.ready(fs, name, &m) => {
                    live.root.write().push(m)
                }
                // Without a state file, a checkpoint file still being written is left to the
                // watcher, which shows it once it is complete.
                Ok(m) => live.unmount(fs, m),
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
        }
        live.root.write().latest = latest;
        *live.applied.lock().unwrap_or_else(|p| p.into_inner()) =
            state_file.and_then(|f| stamp(store, f));
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
                crate::tree::ino::MAX_SUBTREES - 1
            ),
        })?;
        let mut b = Builder::new(fs, store, id);
        if let Err(e) = b.build_checkpoint(name, prefix) {
            // Nothing of it was shown: its slots are given back at once.
            fs.checkpoints
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(n, _)| n != name);
            for &id in &b.ids {
                fs.registry.release(id);
            }
            return Err(e);
        }
        let ids = b.ids.clone();
        fs.registry.set(id, Arc::new(b.finish()));
        Ok(Mounted {
            name: name.to_string(),
            prefix: prefix.to_path_buf(),
            root: Ino::new(id, 1).unwrap_or(ROOT),
            seq: 0,
            ids,
            root_freed: false,
        })
    }

    /// Applies the state file if it changed; returns what the kernel must forget.
    pub(crate) fn refresh(&self, fs: &Fs, store: &dyn Store, force: bool) -> Vec<Invalidate> {
        let mut out = Vec::new();
        self.free_forgotten(fs);
        // Without a state file there is no one file to watch: the directory is listed again.
        let now_stamp = self.state_file(store).and_then(|f| stamp(store, f));
        if !force && self.settled(now_stamp) {
            return out;
        }
        // A missing or half-written state file keeps the last complete state.
        let Some((checkpoints, latest)) = self.current(store) else {
            return out;
        };
        let all_ready = self.mount_new(fs, store, &checkpoints, &mut out);
        self.prune_gone(fs, &checkpoints, &mut out);
        let latest = match self.state_file(store) {
            Some(_) => latest,
            None => self.newest_shown(store),
        };
        self.move_latest(latest, &mut out);
        if !out.is_empty() {
            out.push(Invalidate::Inode(ROOT.0));
        }
        if all_ready {
            *self.applied.lock().unwrap_or_else(|p| p.into_inner()) = now_stamp;
        }
        self.free_forgotten(fs);
        out
    }

    /// Whether there is nothing to apply: the state file is as stamped when last applied
    /// (`now_stamp`; none without a state file: never settled) and no checkpoint is waiting.
    fn settled(&self, now_stamp: Option<(u64, std::time::SystemTime)>) -> bool {
        let waiting_any = !self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        let unchanged = now_stamp.is_some()
            && *self.applied.lock().unwrap_or_else(|p| p.into_inner()) == now_stamp;
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
            match self.mount_one(fs, store, name, prefix) {
                Ok(m) => {
                    if !self.ready(fs, name, &m) {
                        all_ready = false;
                        self.unmount(fs, m);
                        continue;
                    }
                    log::info!(
                        "{}: {} {name} appeared",
                        self.dir.display(),
                        member_kind(prefix)
                    );
                    self.root.write().push(m);
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
        let mut said = self.said.lock().unwrap_or_else(|p| p.into_inner());
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
            out.push(Invalidate::Entry {
                parent: ROOT.0,
                name: m.name.as_bytes().to_vec(),
            });
            fs.checkpoints
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|(n, _)| *n != m.name);
            self.pruned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(m);
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

    /// Whether a new checkpoint is complete: its data shards all there, a Keras file written
    /// to its end (see `TensorSet::complete`); or it waited long enough without its files
    /// growing.
    fn ready(&self, fs: &Fs, name: &str, m: &Mounted) -> bool {
        let sets: Vec<_> = fs
            .checkpoints()
            .into_iter()
            .filter(|(n, _)| n == name)
            .collect();
        let complete = sets.iter().all(|(_, c)| c.complete());
        let mut waiting = self.waiting.lock().unwrap_or_else(|p| p.into_inner());
        if complete {
            waiting.retain(|(n, _, _)| n != name);
            return true;
        }
        let bytes: u64 = sets.iter().map(|(_, c)| c.source_bytes()).sum();
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
                 shorter or longer than it says) after {:?} without growing; mounted as it is",
                self.dir.display(),
                grace
            );
            waiting.retain(|(n, _, _)| n != name);
            return true;
        }
        log::debug!("{}: waiting for its data shards", m.prefix.display());
        false
    }

    /// Drops a checkpoint that was built but not shown (the kernel never saw its inodes).
    fn unmount(&self, fs: &Fs, m: Mounted) {
        fs.checkpoints
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(n, _)| *n != m.name);
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
        let mut pruned = self.pruned.lock().unwrap_or_else(|p| p.into_inner());
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
    pub fn pending_free(&self) -> usize {
        self.pruned.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl DirState {
    fn push(&mut self, mut m: Mounted) {
        self.next_seq += 1;
        m.seq = self.next_seq;
        self.entries.push(m);
    }
}

/// Follows `fs`'s live directory in a thread until `fs` is dropped, calling `notify` with what
/// the kernel must forget after each change.
pub fn follow(fs: &Arc<Fs>, notify: Box<dyn Fn(Invalidate) + Send>) -> std::io::Result<()> {
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
    use crate::parse::dtype::DType;
    use crate::testkit::writer::CheckpointWriter;
    use crate::tree::ino::Ino;

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
    /// `tests/live.rs`: a mount whose listing never returned).
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
        for i in 3..=2 * crate::tree::ino::MAX_SUBTREES {
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
