//! Every subtree instance of a mount, by id (the `subtree` field of an inode number). A slot is
//! filled once and read without a lock; ids are handed out in order. For live checkpoint
//! directories the registry also counts the lookups the kernel holds on each subtree's inodes,
//! so a pruned checkpoint is freed once the kernel has forgotten all of them
//! ([`Prunable`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use super::subtree::{Entry, NodeAttr, Subtree};
use super::Kind;
use crate::error::{FsError, FsResult};
use crate::tree::ino::{Ino, MAX_SUBTREES};

pub struct Registry {
    slots: Box<[OnceLock<Arc<dyn Subtree>>]>,
    next: AtomicUsize,
    lookups: Box<[AtomicU64]>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry {
            slots: (0..MAX_SUBTREES).map(|_| OnceLock::new()).collect(),
            next: AtomicUsize::new(0),
            lookups: (0..MAX_SUBTREES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A fresh id, filled later with [`Registry::set`]; `None` once all are taken.
    pub fn reserve(&self) -> Option<u16> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.slots.len() {
            self.next.store(self.slots.len(), Ordering::Relaxed);
            return None;
        }
        u16::try_from(i).ok()
    }

    /// Fills reserved slot `id`.
    pub fn set(&self, id: u16, t: Arc<dyn Subtree>) {
        if let Some(s) = self.slots.get(id as usize) {
            let _ = s.set(t);
        }
    }

    pub fn get(&self, id: u16) -> Option<Arc<dyn Subtree>> {
        self.slots.get(id as usize)?.get().cloned()
    }

    pub fn looked_up(&self, id: u16, n: u64) {
        if let Some(c) = self.lookups.get(id as usize) {
            c.fetch_add(n, Ordering::Relaxed);
        }
    }

    pub fn forgot(&self, id: u16, n: u64) {
        if let Some(c) = self.lookups.get(id as usize) {
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
        }
    }

    /// Lookups the kernel holds on inodes of subtree `id`.
    pub fn lookups(&self, id: u16) -> u64 {
        self.lookups
            .get(id as usize)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

/// A subtree that can be freed (a pruned checkpoint of a live directory): once freed, its
/// inodes answer "no such file" and its files and memory are released.
pub struct Prunable {
    inner: RwLock<Option<Arc<dyn Subtree>>>,
}

impl Prunable {
    pub fn new(t: Arc<dyn Subtree>) -> Prunable {
        Prunable {
            inner: RwLock::new(Some(t)),
        }
    }

    pub fn free(&self) {
        *self.inner.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    fn get(&self) -> FsResult<Arc<dyn Subtree>> {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(FsError::NotFound)
    }
}

impl Subtree for Prunable {
    fn attr(&self, local: u64) -> FsResult<NodeAttr> {
        self.get()?.attr(local)
    }
    fn kind(&self, local: u64) -> FsResult<Kind> {
        self.get()?.kind(local)
    }
    fn rendered(&self, local: u64) -> bool {
        self.get().is_ok_and(|t| t.rendered(local))
    }
    fn lookup(&self, dir: u64, name: &[u8]) -> FsResult<Ino> {
        self.get()?.lookup(dir, name)
    }
    fn parent(&self, dir: u64) -> FsResult<Option<Ino>> {
        self.get()?.parent(dir)
    }
    fn readdir(
        &self,
        dir: u64,
        cookie: u64,
        add: &mut dyn FnMut(Entry<'_>) -> bool,
    ) -> FsResult<()> {
        self.get()?.readdir(dir, cookie, add)
    }
    fn open(&self, local: u64) -> FsResult<()> {
        self.get()?.open(local)
    }
    fn read(&self, local: u64, offset: u64, size: usize) -> FsResult<Vec<u8>> {
        self.get()?.read(local, offset, size)
    }
    fn readlink(&self, local: u64) -> FsResult<Vec<u8>> {
        self.get()?.readlink(local)
    }
    fn xattrs(&self, local: u64) -> FsResult<Vec<(&'static str, Vec<u8>)>> {
        self.get()?.xattrs(local)
    }
}
