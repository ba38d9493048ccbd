//! Locks taken whatever a panicking thread left behind. Every lock in tfmount guards state its
//! holders keep whole between statements (maps, counters, handles), so a panic in one request
//! (a bug, logged by its thread) leaves the data usable; refusing every later request for a
//! poisoned lock would turn that one bug into a dead mount.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `m` locked, poisoned or not.
pub(crate) fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `l` locked for reading, poisoned or not.
pub(crate) fn read_lock<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// `l` locked for writing, poisoned or not.
pub(crate) fn write_lock<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}
