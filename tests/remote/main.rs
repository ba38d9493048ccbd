//! The `remote` suite: object storage against real servers on 127.0.0.1 (moto, fake-gcs-server,
//! nginx): the stores, remote sources mounted and compared with local mounts, the disk cache,
//! and faults injected by the fault proxy.
//!
//! One test binary (`cargo test --test remote`); each module was a test file of its own. Run one
//! module with a filter: `cargo test --test remote faults::`.

#[path = "../common/mod.rs"]
mod common;

mod disk_cache;
mod faults;
mod remote;
mod remote_mount;
