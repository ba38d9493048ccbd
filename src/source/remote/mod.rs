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

pub mod aws_profile;
pub mod budget;
pub(crate) mod cause;
pub mod config;
pub mod file;
pub mod prefetch;
pub mod read;
pub mod runtime;
pub mod stats;
pub mod store;
pub mod url;

#[cfg(test)]
mod tests;

pub use config::RemoteConfig;
pub use file::RemoteFile;
pub use prefetch::Reader;
pub use stats::Stats;
pub use store::RemoteStore;

use std::io;

/// What went wrong with a remote operation. One line each, naming the object's full URL
/// (`scheme://host[:port]/key` or `s3://bucket/key`, never credentials) and the cause in words:
/// `http://127.0.0.1:8000/run/ckpt.index: HTTP 404 Not Found`, `...: connection refused`,
/// `...: timed out after 60s (remote_timeout)`, `s3://b/: no such bucket (HTTP 404 Not Found)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// The object is not what was opened (rewritten, replaced or deleted): every later read of
    /// it fails the same way.
    #[error("{url}: changed since it was opened ({why})")]
    Changed { url: String, why: String },
    /// No answer (or no success, after retries) within `remote_timeout`.
    #[error("{url}: timed out after {} (remote_timeout)", seconds(after))]
    Timeout {
        url: String,
        after: std::time::Duration,
    },
    /// The store answered 404 for the object.
    #[error("{url}: HTTP 404 Not Found")]
    NotFound { url: String },
    /// The store cannot do this (listing over plain HTTP).
    #[error("{url}: {what}")]
    Unsupported { url: String, what: String },
    /// A URL or credentials problem found before any request.
    #[error("{0}")]
    Config(String),
    /// The request failed (after retries): `msg` is the cause in words (`HTTP 403 Forbidden
    /// (AccessDenied: ...)`, `no such bucket (HTTP 404 Not Found)`, `connection refused`).
    #[error("{url}: {msg}")]
    Request { url: String, msg: String },
    /// A read outside the object as opened.
    #[error("{url}: {len} bytes at offset {offset} lie past its end ({size} bytes)")]
    Range {
        url: String,
        offset: u64,
        len: u64,
        size: u64,
    },
}

impl RemoteError {
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            RemoteError::NotFound { .. } => io::ErrorKind::NotFound,
            RemoteError::Timeout { .. } => io::ErrorKind::TimedOut,
            RemoteError::Unsupported { .. } => io::ErrorKind::Unsupported,
            RemoteError::Config(_) => io::ErrorKind::InvalidInput,
            RemoteError::Range { .. } => io::ErrorKind::UnexpectedEof,
            RemoteError::Changed { .. } | RemoteError::Request { .. } => io::ErrorKind::Other,
        }
    }
}

impl From<RemoteError> for io::Error {
    fn from(e: RemoteError) -> io::Error {
        io::Error::new(e.kind(), e.to_string())
    }
}

impl From<RemoteError> for crate::parse::FormatError {
    fn from(e: RemoteError) -> Self {
        // The message names the object and why (a rewrite, a timeout, ...).
        crate::parse::FormatError::Read(crate::parse::ReadError::Other(e.to_string()))
    }
}

/// `60s`, `1.5s`, `400ms`.
fn seconds(d: &std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() == 0 {
        format!("{}ms", d.subsec_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

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
