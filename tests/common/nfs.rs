//! NFS in the tests: a `tfmount --nfs-serve` server on a free port of 127.0.0.1, read with
//! libnfs's own tools (`nfs-ls`, `nfs-cat`: Debian's libnfs-utils, a client nobody here wrote),
//! and a minimal ONC RPC caller for what those tools cannot do (hold a file handle across a
//! change, read a byte range, resume a listing at a cookie, send UMNT). Part of `tests/common`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `tfmount --nfs-serve 0 SOURCE` process; stopped with SIGTERM on drop.
pub struct NfsServer {
    pub child: Option<Child>,
    pub port: u16,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl NfsServer {
    pub fn start(source: &Path, extra: &[&str]) -> NfsServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .args(extra)
            .args(["--nfs-serve", "0"])
            .arg(source)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn tfmount --nfs-serve");
        // The first line: "serving SOURCE over NFSv3 on 127.0.0.1:PORT (...)".
        let mut first = String::new();
        let out = child.stdout.take().expect("stdout");
        BufReader::new(out)
            .read_line(&mut first)
            .expect("first line");
        let port = first
            .split(" on 127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no port in {first:?}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        NfsServer {
            child: Some(child),
            port,
            log,
            _dir: dir,
        }
    }

    /// libnfs's URL of `path` (relative to the tree's root; the export is the root). Names are
    /// bytes: the URL goes to the tools as they are (libnfs does not decode `%XX`).
    pub fn url(&self, path: impl AsRef<[u8]>) -> std::ffi::OsString {
        use std::os::unix::ffi::OsStringExt;
        let mut u = b"nfs://127.0.0.1//".to_vec();
        u.extend_from_slice(path.as_ref());
        u.extend_from_slice(format!("?nfsport={p}&mountport={p}", p = self.port).as_bytes());
        std::ffi::OsString::from_vec(u)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then the exit code (None: it had to be killed after 10 s).
    pub fn stop(&mut self) -> Option<i32> {
        let child = self.child.take()?;
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        super::wait_with_timeout(child, Duration::from_secs(10))
    }
}

impl Drop for NfsServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether libnfs-utils is installed (`scripts/test.sh --setup` installs it).
pub fn have_libnfs() -> bool {
    Command::new("nfs-ls")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// One entry of `nfs-ls -R`: its path, `d`/`-`/`l`, and size.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listed {
    pub path: Vec<u8>,
    pub kind: char,
    pub size: u64,
}

/// `nfs-ls [-R] URL`, parsed. Lines are `MODE NLINK UID GID SIZE NAME`.
pub fn nfs_ls(url: impl AsRef<std::ffi::OsStr>, recursive: bool) -> Result<Vec<Listed>, String> {
    let url = url.as_ref();
    let mut cmd = Command::new("nfs-ls");
    if recursive {
        cmd.arg("-R");
    }
    let out = cmd.arg(url).output().map_err(|e| format!("nfs-ls: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "nfs-ls {}: {}: {}",
            url.to_string_lossy(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut listed = Vec::new();
    for line in out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let bad = || format!("bad line {:?}", String::from_utf8_lossy(line));
        let mut rest = line;
        let mut fields = Vec::new();
        for _ in 0..5 {
            while rest.first() == Some(&b' ') {
                rest = &rest[1..];
            }
            let end = rest.iter().position(|&b| b == b' ').ok_or_else(bad)?;
            fields.push(&rest[..end]);
            rest = &rest[end + 1..];
        }
        let kind = char::from(*fields[0].first().ok_or_else(bad)?);
        let size = std::str::from_utf8(fields[4])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)?;
        listed.push(Listed {
            path: rest.to_vec(),
            kind,
            size,
        });
    }
    Ok(listed)
}

/// `nfs-cat URL`: the file's bytes, or what nfs-cat said.
pub fn nfs_cat(url: impl AsRef<std::ffi::OsStr>) -> Result<Vec<u8>, String> {
    let url = url.as_ref();
    let out = Command::new("nfs-cat")
        .arg(url)
        .output()
        .map_err(|e| format!("nfs-cat: {e}"))?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A minimal NFSv3 / MOUNT caller over one TCP connection (AUTH_NONE).
pub struct Rpc {
    s: TcpStream,
    xid: u32,
}

pub const NFS: u32 = 100_003;
pub const MOUNT: u32 = 100_005;

/// An XDR builder.
#[derive(Default)]
pub struct X(pub Vec<u8>);

impl X {
    pub fn u32(mut self, v: u32) -> X {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> X {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub fn opaque(mut self, b: &[u8]) -> X {
        self = self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self.0.resize(self.0.len() + (4 - b.len() % 4) % 4, 0);
        self
    }
}

/// An XDR reader over a reply.
pub struct R<'a>(pub &'a [u8]);

impl R<'_> {
    pub fn u32(&mut self) -> u32 {
        let v = u32::from_be_bytes(self.0[..4].try_into().expect("4 bytes"));
        self.0 = &self.0[4..];
        v
    }
    pub fn u64(&mut self) -> u64 {
        (u64::from(self.u32()) << 32) | u64::from(self.u32())
    }
    pub fn opaque(&mut self) -> Vec<u8> {
        let n = self.u32() as usize;
        let v = self.0[..n].to_vec();
        self.0 = &self.0[n + (4 - n % 4) % 4..];
        v
    }
    pub fn skip(&mut self, n: usize) {
        self.0 = &self.0[n..];
    }
    /// A `post_op_attr`: the size, if attributes follow.
    pub fn post_op_attr(&mut self) -> Option<u64> {
        if self.u32() == 0 {
            return None;
        }
        self.skip(20);
        let size = self.u64();
        self.skip(84 - 28);
        Some(size)
    }
}

impl Rpc {
    pub fn connect(port: u16) -> Rpc {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        Rpc { s, xid: 1 }
    }

    /// Sends one raw record and reads the reply record (`None`: the connection closed).
    pub fn raw(&mut self, record: &[u8]) -> Option<Vec<u8>> {
        let mark = (0x8000_0000u32 | record.len() as u32).to_be_bytes();
        self.s.write_all(&mark).ok()?;
        self.s.write_all(record).ok()?;
        let mut out = Vec::new();
        loop {
            let mut h = [0u8; 4];
            self.s.read_exact(&mut h).ok()?;
            let h = u32::from_be_bytes(h);
            let start = out.len();
            out.resize(start + (h & 0x7fff_ffff) as usize, 0);
            self.s.read_exact(&mut out[start..]).ok()?;
            if h & 0x8000_0000 != 0 {
                return Some(out);
            }
        }
    }

    /// Calls `prog` version 3 procedure `proc_`; returns the result after the accepted
    /// reply's header (panics on anything but an accepted, successful call).
    pub fn call(&mut self, prog: u32, proc_: u32, args: X) -> Vec<u8> {
        self.xid += 1;
        let mut rec = X::default()
            .u32(self.xid)
            .u32(0)
            .u32(2)
            .u32(prog)
            .u32(3)
            .u32(proc_)
            .u32(0)
            .u32(0)
            .u32(0)
            .u32(0)
            .0;
        rec.extend_from_slice(&args.0);
        let reply = self.raw(&rec).expect("a reply");
        let mut r = R(&reply);
        assert_eq!(r.u32(), self.xid, "xid");
        assert_eq!(r.u32(), 1, "a reply");
        assert_eq!(r.u32(), 0, "accepted");
        r.u32();
        r.opaque();
        assert_eq!(r.u32(), 0, "success");
        r.0.to_vec()
    }

    /// MNT `path`: the handle.
    pub fn mnt(&mut self, path: &str) -> Result<Vec<u8>, u32> {
        let reply = self.call(MOUNT, 1, X::default().opaque(path.as_bytes()));
        let mut r = R(&reply);
        match r.u32() {
            0 => Ok(r.opaque()),
            s => Err(s),
        }
    }

    pub fn umnt(&mut self, path: &str) {
        self.call(MOUNT, 3, X::default().opaque(path.as_bytes()));
    }

    /// LOOKUP: the handle, or the status.
    pub fn lookup(&mut self, dir: &[u8], name: &str) -> Result<Vec<u8>, u32> {
        let reply = self.call(NFS, 3, X::default().opaque(dir).opaque(name.as_bytes()));
        let mut r = R(&reply);
        match r.u32() {
            0 => Ok(r.opaque()),
            s => Err(s),
        }
    }

    /// A path of names from `dir`.
    pub fn walk(&mut self, dir: &[u8], path: &str) -> Result<Vec<u8>, u32> {
        let mut h = dir.to_vec();
        for c in path.split('/').filter(|c| !c.is_empty()) {
            h = self.lookup(&h, c)?;
        }
        Ok(h)
    }

    /// GETATTR: the size, or the status.
    pub fn getattr(&mut self, fh: &[u8]) -> Result<u64, u32> {
        let reply = self.call(NFS, 1, X::default().opaque(fh));
        let mut r = R(&reply);
        match r.u32() {
            0 => {
                r.skip(20);
                Ok(r.u64())
            }
            s => Err(s),
        }
    }

    /// READ: the bytes and eof, or the status.
    pub fn read(&mut self, fh: &[u8], offset: u64, count: u32) -> Result<(Vec<u8>, bool), u32> {
        let reply = self.call(NFS, 6, X::default().opaque(fh).u64(offset).u32(count));
        let mut r = R(&reply);
        match r.u32() {
            0 => {
                r.post_op_attr();
                let _count = r.u32();
                let eof = r.u32() == 1;
                Ok((r.opaque(), eof))
            }
            s => Err(s),
        }
    }

    /// READDIR from `cookie` with a reply of at most `count` bytes: (name, cookie) pairs, and
    /// eof.
    pub fn readdir(
        &mut self,
        dir: &[u8],
        cookie: u64,
        count: u32,
    ) -> Result<(Vec<(String, u64)>, bool), u32> {
        let reply = self.call(
            NFS,
            16,
            X::default().opaque(dir).u64(cookie).u64(0).u32(count),
        );
        let mut r = R(&reply);
        match r.u32() {
            0 => {
                r.post_op_attr();
                r.skip(8);
                let mut out = Vec::new();
                while r.u32() == 1 {
                    let _fileid = r.u64();
                    let name = String::from_utf8_lossy(&r.opaque()).into_owned();
                    out.push((name, r.u64()));
                }
                Ok((out, r.u32() == 1))
            }
            s => Err(s),
        }
    }

    /// Every name of `dir` by READDIR pages of `count` bytes, `.` and `..` left out.
    pub fn list(&mut self, dir: &[u8], count: u32) -> Vec<(String, u64)> {
        let (mut all, mut cookie) = (Vec::new(), 0);
        let t0 = Instant::now();
        loop {
            let (page, eof) = self.readdir(dir, cookie, count).expect("readdir");
            if let Some((_, c)) = page.last() {
                cookie = *c;
            }
            all.extend(page.into_iter().filter(|(n, _)| n != "." && n != ".."));
            if eof {
                return all;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "listing never ends"
            );
        }
    }
}

/// `nfsstat3` values the tests expect.
pub const NFS3ERR_NOENT: u32 = 2;
pub const NFS3ERR_IO: u32 = 5;
pub const NFS3ERR_STALE: u32 = 70;
