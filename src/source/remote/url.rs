//! Source URLs: `s3://bucket/key`, `gs://bucket/key`, `http://host/path`, `https://host/path`,
//! split into the store they name and the key (path) inside it.
//!
//! `s3://` and `gs://` keys are taken verbatim, as the AWS and gcloud command lines take them
//! (no percent-decoding); an `http(s)://` path is percent-decoded, since it is a URL path. A
//! trailing `/` is dropped: a "directory" is a key prefix.
//!
//! Shard patterns (`?????`) and escapes: see [`parse`].

use crate::source::remote::RemoteError;

/// Which kind of object store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    S3,
    Gcs,
    Http,
}

impl Scheme {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Http => "http",
        }
    }
}

/// A parsed source URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RemoteUrl {
    pub(crate) scheme: Scheme,
    /// The bucket (`s3`, `gs`), or for `http(s)` the origin `scheme://host[:port]`.
    pub(crate) bucket: String,
    /// The key inside the store, no leading or trailing `/` (`""` for the bucket or host root).
    pub(crate) key: String,
}

impl RemoteUrl {
    /// `s3://bucket/` or `https://host/`: the prefix shown before a key in messages.
    pub(crate) fn store_prefix(&self) -> String {
        match self.scheme {
            Scheme::S3 | Scheme::Gcs => format!("{}://{}/", self.scheme.as_str(), self.bucket),
            Scheme::Http => format!("{}/", self.bucket),
        }
    }
}

/// True if `s` is written as a URL this module parses (whether or not it is valid).
pub(crate) fn is_remote(s: &str) -> bool {
    ["s3://", "gs://", "http://", "https://"].iter().any(|p| {
        s.as_bytes()
            .get(..p.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(p.as_bytes()))
    })
}

fn bad(url: &str, why: &str) -> RemoteError {
    RemoteError::Config(format!("{}: not a usable URL: {why}", redact(url)))
}

/// `url` with any user name and password before the host replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// Parses a source URL.
///
/// # Patterns and escapes
///
/// The key is taken as a local SOURCE path is, so a URL takes the patterns a local path takes,
/// written the same way: the shard pattern of a V1 checkpoint
/// `s3://b/run/model.ckpt-?????-of-00003`, `http://host/run/model.ckpt-?????-of-00003` (as a
/// V1 state file writes it). `?` and `*` in the path are characters of the key, never the start
/// of a query (`*` means nothing special to a local path either: it is part of the name).
///
/// - `s3://`, `gs://`: every character after `bucket/` is the key, `?`, `*`, `#`, `%` included;
///   there is nothing to escape (and nothing can be escaped: `%3F` is the three characters).
/// - `http(s)://`: `%XX` is the byte `XX`. A literal `?` in an object name may be written `?` or
///   `%3F`, and must be written `%3F` where a bare one would start a query (below); a literal
///   `#` must be written `%23`, a literal `%` `%25`. A name decoded from `%3F%3F%3F%3F%3F` is
///   the same name as `?????`: the shard pattern, as for a local path.
/// - A query string is not supported: over `http(s)://`, a `?` whose rest of the URL holds a
///   `=` (`?versionId=3`, a presigned URL's `?X-Amz-Signature=...`) is a query and the URL is
///   refused, as is a fragment (`#...`) and a user name or password (`user:pw@host`).
///
/// Refusals are one line: `URL: not a usable URL: why`.
pub(crate) fn parse(url: &str) -> Result<RemoteUrl, RemoteError> {
    let (scheme_str, rest) = url
        .split_once("://")
        .ok_or_else(|| bad(url, "expected s3://, gs://, http:// or https://"))?;
    let scheme = match scheme_str.to_ascii_lowercase().as_str() {
        "s3" => Scheme::S3,
        "gs" => Scheme::Gcs,
        "http" | "https" => Scheme::Http,
        _ => return Err(bad(url, "expected s3://, gs://, http:// or https://")),
    };
    // The authority ends at the first `/` (or, over HTTP, at a `?` or `#` right after it).
    let end = match scheme {
        Scheme::Http => rest.find(['/', '?', '#']),
        Scheme::S3 | Scheme::Gcs => rest.find('/'),
    };
    let (authority, path) = match end {
        Some(i) => (
            &rest[..i],
            rest[i..].strip_prefix('/').unwrap_or(&rest[i..]),
        ),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(bad(
            url,
            if scheme == Scheme::Http {
                "no host"
            } else {
                "no bucket"
            },
        ));
    }
    match scheme {
        Scheme::S3 | Scheme::Gcs => {
            let ok = authority
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
            if !ok || authority.len() > 255 {
                return Err(bad(
                    url,
                    "the bucket name has characters a bucket cannot have",
                ));
            }
            Ok(RemoteUrl {
                scheme,
                bucket: authority.to_string(),
                key: clean_key(url, path)?,
            })
        }
        Scheme::Http => {
            if authority.contains('@') {
                return Err(bad(
                    url,
                    "user names or passwords in the URL are not supported",
                ));
            }
            // `http://host?x`: a query right after the host.
            let after_host = rest[authority.len()..].starts_with(['?', '#']);
            if let Some(why) = query_or_fragment(path).or(after_host.then_some(QUERY)) {
                return Err(bad(url, why));
            }
            let ok = authority.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':' | b'[' | b']')
            });
            if !ok {
                return Err(bad(url, "the host has characters a host cannot have"));
            }
            let decoded =
                percent_decode(path).ok_or_else(|| bad(url, "bad %-escape in the path"))?;
            Ok(RemoteUrl {
                scheme,
                bucket: format!("{}://{}", scheme_str.to_ascii_lowercase(), authority),
                key: clean_key(url, &decoded)?,
            })
        }
    }
}

const QUERY: &str = "query strings (`?name=value`) are not supported; a `?` in the path is part \
    of the object name or a shard pattern (write a `?` of an object name as %3F where a `=` \
    follows it)";

/// Why an HTTP URL's path (after the host's `/`) holds a query or a fragment, if it does: a `#`
/// anywhere, or a `?` with a `=` after it (see [`parse`]).
fn query_or_fragment(path: &str) -> Option<&'static str> {
    if path.contains('#') {
        return Some("fragments (`#...`) are not supported (write a `#` of an object name as %23)");
    }
    if path.find('?').is_some_and(|i| path[i..].contains('=')) {
        return Some(QUERY);
    }
    None
}

/// Drops empty and `.` segments and a trailing `/`; refuses `..` and control characters.
fn clean_key(url: &str, path: &str) -> Result<String, RemoteError> {
    let mut parts = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Err(bad(url, "`..` in the path")),
            s if s.chars().any(|c| c.is_control()) => {
                return Err(bad(url, "control characters in the path"))
            }
            s => parts.push(s),
        }
    }
    Ok(parts.join("/"))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        if c == b'%' {
            let hi = hex(*b.get(i + 1)?)?;
            let lo = hex(*b.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RemoteUrl {
        match parse(s) {
            Ok(u) => u,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn s3_and_gs() {
        let u = p("s3://my-bucket/run/ckpt-1000");
        assert_eq!(u.scheme, Scheme::S3);
        assert_eq!(u.bucket, "my-bucket");
        assert_eq!(u.key, "run/ckpt-1000");
        assert_eq!(u.store_prefix(), "s3://my-bucket/");
        let u = p("gs://b.example/dir/sub/");
        assert_eq!((u.scheme, u.key.as_str()), (Scheme::Gcs, "dir/sub"));
        let u = p("S3://b");
        assert_eq!((u.bucket.as_str(), u.key.as_str()), ("b", ""));
        // Keys are verbatim: no percent-decoding.
        assert_eq!(p("s3://b/a%20b//./c").key, "a%20b/c");
    }

    #[test]
    fn http() {
        let u = p("https://host.example:8443/models/m%20v1/");
        assert_eq!(u.scheme, Scheme::Http);
        assert_eq!(u.bucket, "https://host.example:8443");
        assert_eq!(u.key, "models/m v1");
        assert_eq!(u.store_prefix(), "https://host.example:8443/");
        assert_eq!(p("http://127.0.0.1:9").key, "");
    }

    #[test]
    fn shard_patterns_and_escapes() {
        // `?` and `*` are characters of the key, as in a local path.
        let u = p("http://127.0.0.1:8000/run/model.ckpt-?????-of-00003");
        assert_eq!(u.key, "run/model.ckpt-?????-of-00003");
        assert_eq!(p("https://h/a*b/c?d").key, "a*b/c?d");
        // `%3F` is a `?` too; `%3F` with a `=` after it is no query; `%23` is a `#`.
        assert_eq!(
            p("http://h/run/model.ckpt-%3F%3F%3F%3F%3F-of-00003").key,
            "run/model.ckpt-?????-of-00003"
        );
        assert_eq!(p("http://h/a%3Fb=c").key, "a?b=c");
        assert_eq!(p("http://h/a%23b%25").key, "a#b%");
        // S3 and GCS keys are verbatim: no query, no fragment, no escapes.
        let u = p("s3://b/run/model.ckpt-?????-of-00003");
        assert_eq!(u.key, "run/model.ckpt-?????-of-00003");
        assert_eq!(p("gs://b/a?x=1#y%3F").key, "a?x=1#y%3F");
    }

    #[test]
    fn refused() {
        for s in [
            "s3:/b/k",
            "s3:///k",
            "ftp://h/k",
            "s3://b/../k",
            "s3://b a/k",
            "https://u:p@h/k",
            "https://h/k?x=1",
            "https://h/k?versionId=3&x",
            "https://h/d/model.ckpt-?????-of-00003?X-Amz-Signature=ab",
            "https://h?x",
            "https://h#x",
            "https://h/k#x",
            "https://h/k%23x#",
            "https://h/k%zz",
            "https://h/k%ff",
            "gs://b/k\u{1}",
            "/local/path",
        ] {
            assert!(parse(s).is_err(), "{s} accepted");
        }
        let e = parse("https://h/k?x=1").unwrap_err().to_string();
        assert!(e.contains("query strings") && e.contains("%3F"), "{e}");
        let e = parse("https://user:secret@h/k").unwrap_err().to_string();
        assert!(
            e.starts_with("https://***@h/k: ") && !e.contains("secret"),
            "{e}"
        );
        assert!(is_remote("HTTPS://x"));
        assert!(!is_remote("/s3://x"));
        assert!(!is_remote("s3:"));
        assert!(!is_remote("s\u{e9}://x"));
    }
}
