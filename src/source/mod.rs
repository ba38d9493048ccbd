//! Byte sources: where a model's bytes come from. [`bytes`] is the seam (`Store`: probe, list,
//! open a path; `ByteSource`: an opened file); local files ([`file`], replies from a mapping of
//! them: [`mapped`]), a confined directory
//! tree ([`dirtree`]), object storage ([`remote`]), and following a live directory ([`watch`]).

pub mod bytes;
pub mod dirtree;
pub(crate) mod file;
#[cfg(target_os = "linux")]
pub(crate) mod lease;
/// Read leases are Linux's: elsewhere none is taken.
#[cfg(not(target_os = "linux"))]
#[path = "lease_none.rs"]
pub(crate) mod lease;
pub mod local;
pub(crate) mod mapped;
pub mod remote;
pub(crate) mod watch;
