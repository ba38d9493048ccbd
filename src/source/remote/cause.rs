//! What went wrong with a request, in words: `HTTP 404 Not Found`, `HTTP 403 Forbidden
//! (AccessDenied: Access Denied)`, `no such bucket (HTTP 404 Not Found)`, `connection refused`,
//! `cannot resolve the host name`, a timeout. Read from an error's source chain (the status a
//! store answered, the transport error under it); never an errno's debug name, never `os error
//! N` alone, never more than one line.

use std::error::Error;
use std::time::Duration;

use super::{one_line, RemoteError};

/// The cause of a failed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The server answered with this status (and, from its error body, a code and message).
    Status {
        code: u16,
        detail: Option<String>,
    },
    TimedOut,
    /// Words for anything else (`connection refused`, ...).
    Other(String),
}

/// `HTTP 404 Not Found`.
pub(crate) fn status_words(code: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason());
    match reason {
        Some(r) => format!("HTTP {code} {r}"),
        None => format!("HTTP {code}"),
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cause::Status { code, detail } => {
                if detail.as_deref() == Some("NoSuchBucket")
                    || detail
                        .as_deref()
                        .is_some_and(|d| d.starts_with("NoSuchBucket:"))
                {
                    return write!(f, "no such bucket ({})", status_words(*code));
                }
                f.write_str(&status_words(*code))?;
                match detail {
                    Some(d) => write!(f, " ({d})"),
                    None => Ok(()),
                }
            }
            Cause::TimedOut => f.write_str("timed out"),
            Cause::Other(s) => f.write_str(s),
        }
    }
}

/// The text between `<tag>` and `</tag>` in an XML error body.
fn xml_field<'a>(body: &'a str, tag: &str) -> Option<&'a str> {
    let start = body.find(&format!("<{tag}>"))? + tag.len() + 2;
    let len = body.get(start..)?.find(&format!("</{tag}>"))?;
    body.get(start..start + len)
}

/// The `"message"` of a JSON error body (GCS: `{"error": {"code": 404, "message": "..."}}`).
fn json_message(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let e = v.get("error")?;
    let m = match e.get("message") {
        Some(m) => m.as_str()?.to_string(),
        None => e.as_str()?.to_string(),
    };
    Some(m)
}

/// The code and message of a store's error body, short: `NoSuchBucket: The specified bucket
/// does not exist`. `None` for an empty or unknown body.
fn body_detail(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Some(code) = xml_field(body, "Code") {
        let msg = xml_field(body, "Message").unwrap_or("");
        let d = if msg.is_empty() || msg == code {
            code.to_string()
        } else {
            format!("{code}: {msg}")
        };
        return Some(shorten(&d));
    }
    if let Some(m) = json_message(body) {
        return Some(shorten(&m));
    }
    // An HTML page or plain text: nothing worth a message.
    None
}

/// One line of at most 160 characters.
fn shorten(s: &str) -> String {
    let line = one_line(s);
    if line.len() <= 160 {
        return line;
    }
    let mut cut = 157;
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &line[..cut])
}

/// `Server returned non-2xx status code: 404 Not Found: <body>` (object_store's words): the
/// status and the body.
fn parse_status(text: &str) -> Option<(u16, &str)> {
    let at = text.find("status code: ")? + "status code: ".len();
    let rest = text.get(at..)?;
    let code: u16 = rest.get(..3)?.parse().ok()?;
    if !(100..=599).contains(&code) {
        return None;
    }
    // The body follows the reason phrase and `: `.
    let body = rest
        .get(3..)
        .and_then(|r| r.split_once(": "))
        .map_or("", |(_, b)| b);
    Some((code, body))
}

/// An I/O error's kind in words, where that says it all.
fn io_words(e: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind as K;
    Some(match e.kind() {
        K::ConnectionRefused => "connection refused",
        K::ConnectionReset => "connection reset by the server",
        K::ConnectionAborted => "connection aborted",
        K::NotConnected => "not connected",
        K::AddrNotAvailable => "address not available",
        K::BrokenPipe => "connection closed by the server (broken pipe)",
        K::UnexpectedEof => "connection closed by the server before the answer ended",
        K::HostUnreachable => "host unreachable",
        K::NetworkUnreachable => "network unreachable",
        K::PermissionDenied => "connection not permitted",
        _ => return None,
    })
}

/// Drops ` (os error N)` from an I/O error's text.
fn without_errno(s: &str) -> &str {
    match s.rfind(" (os error ") {
        Some(i) if s.ends_with(')') => &s[..i],
        _ => s,
    }
}

/// The URI of a request object_store made to fetch credentials (an instance metadata service,
/// a token endpoint), if the chain's `Error performing METHOD URI in ...` names one: a failure
/// there is not the object's.
fn credentials_request(texts: &[String]) -> Option<String> {
    const ENDPOINTS: [&str; 9] = [
        "169.254.169.254",
        "169.254.170.2",
        "[fd00:ec2::254]",
        "metadata.google.internal",
        "/computeMetadata/",
        "oauth2.googleapis.com",
        "/latest/api/token",
        "/latest/meta-data/",
        "amazonaws.com/?Action=AssumeRole",
    ];
    texts.iter().find_map(|t| {
        let at = t.find("Error performing ")? + "Error performing ".len();
        let uri = t.get(at..)?.split_whitespace().nth(1)?;
        ENDPOINTS
            .iter()
            .any(|e| uri.contains(e))
            .then(|| uri.split('?').next().unwrap_or(uri).to_string())
    })
}

/// The cause of `e`, from its source chain.
pub(crate) fn cause_of(e: &(dyn Error + 'static)) -> Cause {
    let (cause, texts) = request_cause(e);
    match credentials_request(&texts) {
        Some(uri) => Cause::Other(format!("getting credentials from {uri}: {cause}")),
        None => cause,
    }
}

/// The cause of `e` and the messages of its chain.
fn request_cause(e: &(dyn Error + 'static)) -> (Cause, Vec<String>) {
    let mut texts: Vec<String> = Vec::new();
    let mut words: Option<&'static str> = None;
    let mut timed_out = false;
    let mut dns = false;
    let mut status: Option<u16> = None;
    let mut cur: Option<&(dyn Error + 'static)> = Some(e);
    let mut depth = 0;
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                timed_out = true;
            }
            words = words.or(io_words(io));
        }
        if let Some(r) = c.downcast_ref::<reqwest::Error>() {
            timed_out |= r.is_timeout();
            status = status.or(r.status().map(|s| s.as_u16()));
        }
        if let Some(h) = c.downcast_ref::<object_store::client::HttpError>() {
            timed_out |= h.kind() == object_store::client::HttpErrorKind::Timeout;
        }
        let t = c.to_string();
        dns |= t.contains("dns error") || t.contains("failed to lookup address");
        texts.push(t);
        cur = c.source();
        depth += 1;
        if depth > 16 {
            break;
        }
    }
    for t in &texts {
        if let Some((code, body)) = parse_status(t) {
            let c = Cause::Status {
                code,
                detail: body_detail(body),
            };
            return (c, texts);
        }
    }
    if let Some(code) = status {
        return (Cause::Status { code, detail: None }, texts);
    }
    if let Some(w) = words {
        return (Cause::Other(w.to_string()), texts);
    }
    if timed_out {
        return (Cause::TimedOut, texts);
    }
    if dns {
        return (Cause::Other("cannot resolve the host name".into()), texts);
    }
    // The innermost message is the most specific (`invalid peer certificate: ...`).
    let inner = texts
        .iter()
        .rev()
        .map(|t| without_errno(t).trim())
        .find(|t| !t.is_empty())
        .unwrap_or("unknown error");
    let c = Cause::Other(shorten(inner));
    (c, texts)
}

/// What a server that ignores `Range:` headers is told (object_store's own words name only
/// the object).
pub(crate) const RANGE_UNSUPPORTED: &str = "the server does not answer HTTP range requests (it sends the whole file when asked for part of it), and tfmount reads files in parts: serve it with a server that does (nginx, any object store) or download it";

/// A store error as a [`RemoteError`] about `url`; `timeout` is `remote_timeout`.
pub(crate) fn map_err(url: &str, timeout: Duration, e: object_store::Error) -> RemoteError {
    use object_store::Error as E;
    match &e {
        E::NotFound { .. } => {
            return RemoteError::NotFound { url: url.into() };
        }
        E::NotSupported { .. } | E::NotImplemented { .. } => {
            let text = e.to_string();
            let what = if text.contains("Range request not supported") {
                RANGE_UNSUPPORTED.to_string()
            } else {
                one_line(&text)
            };
            return RemoteError::Unsupported {
                url: url.into(),
                what,
            };
        }
        _ => {}
    }
    from_cause(url, timeout, cause_of(&e))
}

/// A failed plain-HTTP request (the directory probe) as a [`RemoteError`] about `url`.
pub(crate) fn from_reqwest(url: &str, timeout: Duration, e: &reqwest::Error) -> RemoteError {
    from_cause(url, timeout, cause_of(e))
}

/// A request that failed for `cause`: a timeout names `remote_timeout`, anything else says
/// the cause in words.
fn from_cause(url: &str, timeout: Duration, cause: Cause) -> RemoteError {
    match cause {
        Cause::TimedOut => RemoteError::Timeout {
            url: url.into(),
            after: timeout,
        },
        c => RemoteError::Request {
            url: url.into(),
            msg: c.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_bodies_in_words() {
        let s3 = "Server returned non-2xx status code: 404 Not Found: <?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        let (code, body) = parse_status(s3).unwrap();
        let c = Cause::Status {
            code,
            detail: body_detail(body),
        };
        assert_eq!(c.to_string(), "no such bucket (HTTP 404 Not Found)");
        let denied = "Server returned non-2xx status code: 403 Forbidden: <Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
        let (code, body) = parse_status(denied).unwrap();
        let c = Cause::Status {
            code,
            detail: body_detail(body),
        };
        assert_eq!(
            c.to_string(),
            "HTTP 403 Forbidden (AccessDenied: Access Denied)"
        );
        let gcs = r#"Server returned non-2xx status code: 401 Unauthorized: {"error":{"code":401,"message":"Login Required"}}"#;
        let (code, body) = parse_status(gcs).unwrap();
        assert_eq!(
            Cause::Status {
                code,
                detail: body_detail(body)
            }
            .to_string(),
            "HTTP 401 Unauthorized (Login Required)"
        );
        let html =
            "Server returned non-2xx status code: 404 Not Found: <html><body>nope</body></html>";
        let (code, body) = parse_status(html).unwrap();
        assert_eq!(body_detail(body), None);
        assert_eq!(status_words(code), "HTTP 404 Not Found");
        assert_eq!(status_words(599), "HTTP 599");
        assert_eq!(parse_status("status code: 9x"), None);
        assert_eq!(parse_status("status code: "), None);
    }

    /// An error whose message is `text`, with no source.
    #[derive(Debug)]
    struct Msg(&'static str);
    impl std::fmt::Display for Msg {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl Error for Msg {}

    #[test]
    fn a_failed_credentials_request_is_said_to_be_one() {
        let e = Msg("Generic S3 error: Error performing PUT http://169.254.169.254/latest/api/token in 7ms - Server returned non-2xx status code: 403 Forbidden: denied");
        assert_eq!(
            cause_of(&e).to_string(),
            "getting credentials from http://169.254.169.254/latest/api/token: HTTP 403 Forbidden"
        );
        let e = Msg("Generic S3 error: Error performing GET http://127.0.0.1:9000/b/k in 7ms - Server returned non-2xx status code: 403 Forbidden: <Error><Code>AccessDenied</Code></Error>");
        assert_eq!(
            cause_of(&e).to_string(),
            "HTTP 403 Forbidden (AccessDenied)"
        );
    }

    #[test]
    fn io_errors_in_words() {
        let e = std::io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert_eq!(cause_of(&e).to_string(), "connection refused");
        let e = std::io::Error::from_raw_os_error(libc::ETIMEDOUT);
        assert_eq!(cause_of(&e), Cause::TimedOut);
        let e = std::io::Error::from_raw_os_error(libc::EILSEQ);
        let w = cause_of(&e).to_string();
        assert!(!w.contains("os error"), "{w}");
        assert_eq!(without_errno("Boom (os error 84)"), "Boom");
        assert_eq!(without_errno("plain"), "plain");
    }
}
