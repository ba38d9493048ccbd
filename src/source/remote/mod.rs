//! Object storage behind the byte-source seam: `s3://`, `gs://` and `http(s)://` sources read
//! with ranged GETs through the `object_store` crate.
//!
//! - [`url`]: a source URL split into store and key.
//! - [`config`]: options (`remote_timeout`, `remote_cache`, anonymous) and the client built from
//!   the standard environment (AWS and Google variables, `~/.aws` profiles, gcloud files).
//! - [`store::RemoteStore`]: a [`Store`](super::bytes::Store): probe, list, open (one HEAD).
//! - [`read`]: the read primitives: an [`Object`](read::Object) as opened (every GET carries
//!   `If-Match` with the ETag seen at open), the one GET function, random reads of whole MiB
//!   blocks through a small shared cache.
//! - [`prefetch::Reader`]: one per opened tensor, read-ahead for sequential reads, one window
//!   per sequential reader (stream); built on [`read`].
//! - [`file::RemoteFile`]: a [`ByteSource`](super::bytes::ByteSource) over both.
//! - [`budget`]: the one memory budget every fetched byte is reserved from.
//!
//! Everything is bounded: every operation fails within `remote_timeout` (retries included),
//! fetched bytes held stay below `remote_cache` + [`budget::OVERDRAFT`].

pub(crate) mod aws_profile;
pub(crate) mod budget;
pub(crate) mod cause;
pub(crate) mod config;
pub(crate) mod disk;
pub mod env;
pub(crate) mod file;
pub(crate) mod prefetch;
pub(crate) mod read;
pub(crate) mod runtime;
pub(crate) mod stats;
pub(crate) mod store;
pub(crate) mod url;

#[cfg(test)]
mod tests;

pub use config::RemoteConfig;
pub(crate) use prefetch::Reader;
pub use store::RemoteStore;

pub(crate) use crate::error::RemoteError;

/// One line of at most 300 characters from a server's or library's message.
pub(crate) fn one_line(s: &str) -> String {
    let mut out = String::new();
    for w in s.split_whitespace() {
        if out.len() + w.len() + 1 > 300 {
            out.push_str(" ...");
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}
