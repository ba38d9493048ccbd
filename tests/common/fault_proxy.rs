//! A fault-injecting HTTP/1.1 proxy for the tests, on 127.0.0.1 only: it listens on a free
//! port and forwards every request to a server the test started (nginx, moto), one thread per
//! connection, one request per connection (it answers `Connection: close`, so clients open a
//! new connection for each request and every request is seen and counted).
//!
//! The test sets a plan: [`Rule`]s that pick requests by method, a substring of the path and
//! whether they carry a `Range`, and hit matching requests `first..first + count` (0-based, in
//! the order they arrive) with a [`Fault`]: a connection reset after N bytes of the body, a
//! body cut short of its `Content-Length`, a status of its own (503 with `Retry-After`), a body
//! that stops arriving, a flipped byte, `If-Match` dropped (a server that ignores it). A rule
//! may also run a hook once, before the first request it hits is forwarded (e.g. rewriting the
//! object on the server): requests wait for it. [`FaultProxy::injected`] counts the faults that
//! took effect, so that a test can check that its fault really happened; [`FaultProxy::seen`]
//! lists every request, with the status it got.
//!
//! Bounded: sockets time out after 30 s, a stalled body is held at most 60 s (or until
//! [`FaultProxy::release`], [`FaultProxy::set`] or drop), and dropping the proxy stops it.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What happens to a request a rule hits.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Forwarded unchanged (a rule that counts requests, or runs its hook only).
    None,
    /// The answer's head and `after` bytes of its body, then a TCP reset.
    Reset { after: u64 },
    /// The answer's head (its `Content-Length` unchanged) and `keep` bytes of its body, then
    /// the connection is closed cleanly: a body shorter than its `Content-Length`.
    Short { keep: u64 },
    /// This status (with `Retry-After: retry_after` seconds if given, and `body`) instead of
    /// forwarding the request.
    Status {
        code: u16,
        retry_after: Option<u32>,
        body: String,
    },
    /// The answer's head and `after` bytes of its body, then nothing: the connection stays open
    /// and silent until released (at most 60 s).
    Stall { after: u64 },
    /// Forwarded, with byte `at` of the body (if it has one) inverted.
    Flip { at: u64 },
    /// Forwarded without its `If-Match` header: a server that ignores it.
    DropIfMatch,
    /// Forwarded unchanged after waiting this long: a far server, whose round trips a test
    /// can count (see [`Seen::arrived`]).
    Delay(Duration),
}

impl Fault {
    fn name(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Reset { .. } => "reset",
            Fault::Short { .. } => "short",
            Fault::Status { .. } => "status",
            Fault::Stall { .. } => "stall",
            Fault::Flip { .. } => "flip",
            Fault::DropIfMatch => "drop-if-match",
            Fault::Delay(_) => "delay",
        }
    }
}

/// A hook run once, before the first request a rule hits is forwarded.
pub(crate) type Hook = Box<dyn FnOnce() + Send>;

/// Which requests get a fault.
pub struct Rule {
    method: String,
    path: String,
    ranged: bool,
    first: usize,
    count: usize,
    fault: Fault,
    hook: Option<Hook>,
    /// Matching requests seen so far.
    matched: usize,
    /// Requests hit.
    hits: usize,
}

impl Rule {
    /// GETs of paths containing `path` that carry a `Range` header; by default the first one
    /// is hit, with [`Fault::None`].
    pub fn ranged_get(path: &str) -> Rule {
        Rule {
            method: "GET".into(),
            path: path.into(),
            ranged: true,
            first: 0,
            count: 1,
            fault: Fault::None,
            hook: None,
            matched: 0,
            hits: 0,
        }
    }

    /// Requests of any method (`""`) or of `method`, to paths containing `path`.
    pub fn any(method: &str, path: &str) -> Rule {
        Rule {
            method: method.into(),
            ranged: false,
            ..Rule::ranged_get(path)
        }
    }

    /// Hits the `n`-th matching request (0-based) first.
    pub fn nth(mut self, n: usize) -> Rule {
        self.first = n;
        self
    }

    /// Hits `n` matching requests in a row (`usize::MAX`: all of them from the first hit on).
    pub fn times(mut self, n: usize) -> Rule {
        self.count = n;
        self
    }

    pub fn fault(mut self, f: Fault) -> Rule {
        self.fault = f;
        self
    }

    /// Runs `hook` before the first request this rule hits is forwarded.
    pub fn before(mut self, hook: impl FnOnce() + Send + 'static) -> Rule {
        self.hook = Some(Box::new(hook));
        self
    }

    fn matches(&self, r: &Request) -> bool {
        (self.method.is_empty() || self.method == r.method)
            && r.path.contains(&self.path)
            && (!self.ranged || r.header("range").is_some())
    }
}

/// A request the proxy saw, and what it did with it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub if_match: Option<String>,
    /// The fault the plan chose (`None`: forwarded unchanged).
    pub(crate) fault: Option<&'static str>,
    /// Whether that fault took effect (a body was cut, a byte flipped, an `If-Match` dropped, a
    /// status answered): a body shorter than the cut is not a fault.
    pub injected: bool,
    /// The status the client got (0: none, the connection failed).
    pub status: u16,
    /// Bytes of the answer's body sent to the client (counted before each write: the client
    /// cannot have them before they are counted).
    pub body_bytes: u64,
    /// When the request's head was read, and when its answer was all sent (`None`: not yet):
    /// a request that arrived after another's answer ended may have waited for it; one that
    /// arrived before cannot have (see [`rounds`]).
    pub(crate) arrived: Instant,
    pub ended: Option<Instant>,
}

impl Seen {
    /// The `A` and `B` of the request's `Range: bytes=A-B` (`B` inclusive, as written), if it
    /// has such a range.
    pub fn byte_range(&self) -> Option<(u64, u64)> {
        let (a, b) = self
            .range
            .as_deref()?
            .strip_prefix("bytes=")?
            .split_once('-')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    }
}

/// Rounds of requests one after another in `seen`: the longest chain of requests each of which
/// arrived after the answer to the one before it ended. Requests sent at once count as one
/// round, whatever their number; a client that waits for an answer before asking the next
/// question adds one. Meaningful when each answer takes far longer than the client takes to
/// send requests it has at hand ([`Fault::Delay`] on every request).
pub fn rounds(seen: &[Seen]) -> usize {
    let mut by_arrival: Vec<&Seen> = seen.iter().collect();
    by_arrival.sort_by_key(|s| s.arrived);
    let mut depth: Vec<usize> = Vec::with_capacity(by_arrival.len());
    for (i, r) in by_arrival.iter().enumerate() {
        let before = by_arrival[..i]
            .iter()
            .zip(&depth)
            .filter(|(q, _)| q.ended.is_some_and(|e| e <= r.arrived))
            .map(|(_, d)| *d)
            .max()
            .unwrap_or(0);
        depth.push(before + 1);
    }
    depth.into_iter().max().unwrap_or(0)
}

struct Plan {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    /// Bumped by every `set`, `release` and drop: stalled bodies of older generations end.
    generation: u64,
}

struct Shared {
    upstream: u16,
    plan: Mutex<Plan>,
    released: Condvar,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The proxy; stopped when dropped.
pub struct FaultProxy {
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

const IO_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_STALL: Duration = Duration::from_secs(60);
const MAX_HEAD: usize = 64 << 10;

impl FaultProxy {
    /// A proxy on a free port of 127.0.0.1 forwarding to `127.0.0.1:upstream`, with no rules.
    pub fn start(upstream: u16) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let shared = Arc::new(Shared {
            upstream,
            plan: Mutex::new(Plan {
                rules: Vec::new(),
                seen: Vec::new(),
                generation: 0,
            }),
            released: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let s = Arc::clone(&s);
                    let _ = std::thread::Builder::new()
                        .name("fault-proxy-conn".into())
                        .spawn(move || {
                            // Clients may close early (they detect the fault): not an error.
                            let _ = serve(&s, conn);
                        });
                }
            })
            .expect("proxy thread");
        FaultProxy {
            port,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Replaces the plan (releasing stalled bodies) and forgets the requests seen.
    pub fn set(&self, rules: Vec<Rule>) {
        let mut p = self.shared.lock();
        p.rules = rules;
        p.seen.clear();
        p.generation += 1;
        drop(p);
        self.shared.released.notify_all();
    }

    /// No rules: every request is forwarded unchanged (stalled bodies are released).
    pub fn clear(&self) {
        self.set(Vec::new());
    }

    /// Ends the stalled bodies (their connections are closed).
    pub fn release(&self) {
        self.shared.lock().generation += 1;
        self.shared.released.notify_all();
    }

    /// Faults that took effect since the last [`FaultProxy::set`].
    pub fn injected(&self) -> usize {
        self.shared
            .lock()
            .seen
            .iter()
            .filter(|s| s.injected)
            .count()
    }

    /// Requests hit by each rule, in order.
    pub fn hits(&self) -> Vec<usize> {
        self.shared.lock().rules.iter().map(|r| r.hits).collect()
    }

    /// Every request since the last [`FaultProxy::set`].
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.lock().seen.clone()
    }

    /// The requests seen, one line each (for messages).
    pub fn report(&self) -> String {
        self.seen()
            .iter()
            .map(|s| {
                format!(
                    "{} {} range={} if-match={} -> {} {}\n",
                    s.method,
                    s.path,
                    s.range.as_deref().unwrap_or("-"),
                    s.if_match.as_deref().unwrap_or("-"),
                    s.status,
                    match (s.fault, s.injected) {
                        (Some(f), true) => f,
                        (Some(_), false) => "(fault not reached)",
                        (None, _) => "",
                    }
                )
            })
            .collect()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.release();
        // Wakes the accept loop.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

/// A request's head.
struct Request {
    method: String,
    path: String,
    /// The request line and headers as received, one string per line (no CRLF).
    lines: Vec<String>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.lines.iter().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Reads up to the end of an HTTP head (`\r\n\r\n`): the head and the bytes read after it.
fn read_head(s: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::other("head too long"));
        }
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn lines_of(head: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(head)
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

fn set_timeouts(s: &TcpStream) -> io::Result<()> {
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))
}

/// Closes `s` with a TCP reset (SO_LINGER 0).
fn reset(s: TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket descriptor and a linger struct of the size given.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}

/// Records the status answered to the request at `idx` of the log.
fn record(sh: &Shared, idx: usize, generation: u64, status: u16) {
    let mut p = sh.lock();
    if p.generation == generation {
        if let Some(s) = p.seen.get_mut(idx) {
            s.status = status;
        }
    }
}

/// Adds `n` bytes to the body sent for the request at `idx`.
fn sent_body(sh: &Shared, idx: usize, generation: u64, n: u64) {
    let mut p = sh.lock();
    if p.generation == generation {
        if let Some(s) = p.seen.get_mut(idx) {
            s.body_bytes += n;
        }
    }
}

/// Records that the fault chosen for the request at `idx` took effect.
fn took_effect(sh: &Shared, idx: usize, generation: u64) {
    let mut p = sh.lock();
    if p.generation == generation {
        if let Some(s) = p.seen.get_mut(idx) {
            s.injected = s.fault.is_some();
        }
    }
}

/// Records, when dropped, that the answer to the request at `idx` ended.
struct Ends<'a> {
    sh: &'a Shared,
    idx: usize,
    generation: u64,
}

impl Drop for Ends<'_> {
    fn drop(&mut self) {
        let mut p = self.sh.lock();
        if p.generation == self.generation {
            if let Some(s) = p.seen.get_mut(self.idx) {
                s.ended = Some(Instant::now());
            }
        }
    }
}

/// One connection: one request, forwarded (or not) as the plan says.
fn serve(sh: &Shared, mut client: TcpStream) -> io::Result<()> {
    set_timeouts(&client)?;
    let (head, mut body_start) = read_head(&mut client)?;
    let arrived = Instant::now();
    let lines = lines_of(&head);
    let mut first = lines
        .first()
        .map(|l| l.split_whitespace())
        .into_iter()
        .flatten();
    let req = Request {
        method: first.next().unwrap_or("").to_string(),
        path: first.next().unwrap_or("").to_string(),
        lines,
    };
    // The plan's decision, hooks run under the lock (other requests wait for them).
    let (fault, idx, generation) = {
        let mut p = sh.lock();
        let mut fault = None;
        for r in p.rules.iter_mut() {
            if !r.matches(&req) {
                continue;
            }
            let n = r.matched;
            r.matched += 1;
            if fault.is_none() && n >= r.first && n - r.first < r.count {
                r.hits += 1;
                if let Some(h) = r.hook.take() {
                    h();
                }
                fault = Some(r.fault.clone());
            }
        }
        let fault = fault.unwrap_or(Fault::None);
        p.seen.push(Seen {
            method: req.method.clone(),
            path: req.path.clone(),
            range: req.header("range").map(str::to_string),
            if_match: req.header("if-match").map(str::to_string),
            fault: (!matches!(fault, Fault::None)).then(|| fault.name()),
            injected: false,
            status: 0,
            body_bytes: 0,
            arrived,
            ended: None,
        });
        (fault, p.seen.len() - 1, p.generation)
    };
    let _ends = Ends {
        sh,
        idx,
        generation,
    };
    if let Fault::Delay(d) = &fault {
        std::thread::sleep(*d);
        took_effect(sh, idx, generation);
    }
    if let Fault::Status {
        code,
        retry_after,
        body,
    } = &fault
    {
        let mut a = format!("HTTP/1.1 {code} Injected\r\nConnection: close\r\n");
        if let Some(s) = retry_after {
            a.push_str(&format!("Retry-After: {s}\r\n"));
        }
        a.push_str(&format!(
            "Content-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ));
        // Recorded first: the client may act on the answer before this thread runs again.
        record(sh, idx, generation, *code);
        took_effect(sh, idx, generation);
        client.write_all(a.as_bytes())?;
        let _ = client.shutdown(Shutdown::Write);
        return Ok(());
    }

    // The request, upstream: one request per connection, `If-Match` dropped if asked.
    let mut up = TcpStream::connect(("127.0.0.1", sh.upstream))?;
    set_timeouts(&up)?;
    let mut out = String::new();
    for (i, l) in req.lines.iter().enumerate() {
        let name = l
            .split_once(':')
            .map(|(k, _)| k.trim().to_ascii_lowercase());
        let drop_it = i > 0
            && match name.as_deref() {
                Some("connection") | Some("keep-alive") => true,
                Some("if-match") => matches!(fault, Fault::DropIfMatch),
                _ => false,
            };
        if !drop_it {
            out.push_str(l);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    if matches!(fault, Fault::DropIfMatch) && req.header("if-match").is_some() {
        took_effect(sh, idx, generation);
    }
    up.write_all(out.as_bytes())?;
    // A request body (setup calls only): as announced by Content-Length.
    let body_len: u64 = req
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    body_start.truncate(body_len as usize);
    up.write_all(&body_start)?;
    let mut left = body_len - body_start.len() as u64;
    let mut chunk = vec![0u8; 64 << 10];
    while left > 0 {
        let n = client.read(&mut chunk[..(left.min(64 << 10)) as usize])?;
        if n == 0 {
            return Ok(());
        }
        up.write_all(&chunk[..n])?;
        left -= n as u64;
    }

    // The answer: its head with `Connection: close`, then its body, faults applied.
    let (rhead, mut pending) = read_head(&mut up)?;
    let rlines = lines_of(&rhead);
    let status: u16 = rlines
        .first()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut a = String::new();
    for (i, l) in rlines.iter().enumerate() {
        let name = l
            .split_once(':')
            .map(|(k, _)| k.trim().to_ascii_lowercase());
        if i > 0 && matches!(name.as_deref(), Some("connection") | Some("keep-alive")) {
            continue;
        }
        a.push_str(l);
        a.push_str("\r\n");
    }
    a.push_str("Connection: close\r\n\r\n");
    record(sh, idx, generation, status);
    client.write_all(a.as_bytes())?;
    let cut = match fault {
        Fault::Reset { after } | Fault::Short { keep: after } | Fault::Stall { after } => {
            Some(after)
        }
        _ => None,
    };
    let mut sent = 0u64;
    let mut truncated = false;
    loop {
        if pending.is_empty() {
            pending.resize(64 << 10, 0);
            let n = up.read(&mut pending)?;
            pending.truncate(n);
            if n == 0 {
                break;
            }
        }
        if let Fault::Flip { at } = fault {
            if at >= sent && at < sent + pending.len() as u64 {
                pending[(at - sent) as usize] ^= 0xff;
                took_effect(sh, idx, generation);
            }
        }
        let mut n = pending.len();
        if let Some(c) = cut {
            n = n.min(c.saturating_sub(sent) as usize);
        }
        sent_body(sh, idx, generation, n as u64);
        client.write_all(&pending[..n])?;
        sent += n as u64;
        if n < pending.len() {
            truncated = true;
            break;
        }
        pending.clear();
    }
    drop(up);
    if truncated {
        took_effect(sh, idx, generation);
    }
    match fault {
        Fault::Reset { .. } if truncated => reset(client),
        Fault::Stall { .. } if truncated => {
            client.flush()?;
            let t0 = Instant::now();
            let mut p = sh.lock();
            while p.generation == generation
                && !sh.stop.load(Ordering::SeqCst)
                && t0.elapsed() < MAX_STALL
            {
                p = sh
                    .released
                    .wait_timeout(p, Duration::from_millis(200))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
            }
            drop(p);
            reset(client);
        }
        _ => {
            let _ = client.shutdown(Shutdown::Write);
        }
    }
    Ok(())
}
