//! Read leases where the OS has none (`fcntl(F_SETLEASE)` is Linux's; `lease.rs` there): none
//! is ever taken. A process that asked for them ([`install`]: the daemon) so never maps a local
//! file for its replies: it reads with `pread` and checks after each copy, as on Linux where a
//! lease cannot be had. Elsewhere (the subcommands, the Python module) files are mapped without
//! one, as on Linux.

use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Whether this process asked for leases ([`install`] was called).
static WANTED: AtomicBool = AtomicBool::new(false);

/// Asks for leases (the daemon, at start); fails, as there are none: nothing is mapped from then on.
pub(crate) fn install() -> io::Result<()> {
    WANTED.store(true, Ordering::SeqCst);
    Err(none())
}

fn none() -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, "read leases are Linux's")
}

/// Whether files are mapped only under a lease in this process (so, here, never).
pub(crate) fn wanted() -> bool {
    WANTED.load(Ordering::SeqCst)
}

/// A read lease: none can be had here.
pub(crate) enum Lease {}

impl Lease {
    /// Fails: this OS has no read leases.
    pub(crate) fn take(_file: &File, _path: &Path) -> io::Result<Arc<Lease>> {
        Err(none())
    }

    /// Never called: no lease exists.
    pub(crate) fn enter(self: &Arc<Self>) -> Option<UnderWay> {
        match **self {}
    }
}

/// A mapped reply under a lease: none exists here.
pub(crate) enum UnderWay {}
