//! One ONC RPC call (RFC 5531) answered from [`Fs`]: NFSv3 (RFC 1813, read-only: every
//! procedure that would change something answers `NFS3ERR_ROFS`), its MOUNT protocol (version
//! 3: any directory inside the tree can be mounted, as knfsd allows) and the portmapper's
//! GETPORT (for clients that ask the server's own port where NFS and MOUNT are). Pure over the
//! call's bytes and the core: no sockets here (`server.rs` has them), so the fuzz target feeds
//! it hostile records directly.
//!
//! A file handle is `instance | inode | generation`, 24 bytes: the inode number and generation
//! the core already has ([`Fs`]'s registry), so no table grows per lookup, and a handle stays
//! valid for the server's life. A handle of another server instance, or of a live directory's
//! pruned checkpoint (its subtree freed: [`Fs::is_current`]), is `NFS3ERR_STALE`.

use std::time::SystemTime;

use bytes::Bytes;

use super::xdr::{opaque_len, Garbage, Reader, Writer};
use crate::error::FsError;
use crate::fs::{Attr, Fs, Kind, ROOT};

pub(crate) const PORTMAP: u32 = 100_000;
pub(crate) const NFS: u32 = 100_003;
pub(crate) const MOUNT: u32 = 100_005;

/// The largest READ reply's data, and the size clients are told to read in (FSINFO `rtmax`,
/// `rtpref`): 1 MiB, the largest the Linux and macOS clients use.
pub(crate) const RTMAX: u32 = 1 << 20;
/// The largest READDIR/READDIRPLUS reply made, whatever the client asks.
const DIR_REPLY_MAX: usize = 1 << 20;
/// RFC 5531: an authentication body is at most 400 bytes.
const MAX_AUTH: usize = 400;
/// RFC 1813: a file handle is at most 64 bytes.
const FHSIZE3: usize = 64;
/// RFC 1813: a MOUNT path is at most 1024 bytes.
const MNTPATHLEN: usize = 1024;
/// The longest file name read from a call (longer is garbage; names the tree has are shorter).
const MAX_NAME: usize = 4096;
/// The encoded size of a `fattr3`.
const FATTR3_LEN: usize = 84;

/// NFSv3 status codes (`nfsstat3`) used here.
mod status {
    pub(super) const OK: u32 = 0;
    pub(super) const NOENT: u32 = 2;
    pub(super) const IO: u32 = 5;
    pub(super) const ACCES: u32 = 13;
    pub(super) const NOTDIR: u32 = 20;
    pub(super) const ISDIR: u32 = 21;
    pub(super) const INVAL: u32 = 22;
    pub(super) const ROFS: u32 = 30;
    pub(super) const NAMETOOLONG: u32 = 63;
    pub(super) const STALE: u32 = 70;
    pub(super) const BADHANDLE: u32 = 10001;
    pub(super) const NOTSUPP: u32 = 10004;
    pub(super) const TOOSMALL: u32 = 10005;
}

/// The `accept_stat` of an accepted call.
mod accept {
    pub(super) const SUCCESS: u32 = 0;
    pub(super) const PROG_UNAVAIL: u32 = 1;
    pub(super) const PROG_MISMATCH: u32 = 2;
    pub(super) const PROC_UNAVAIL: u32 = 3;
    pub(super) const GARBAGE_ARGS: u32 = 4;
}

/// The NFSv3 status of a failed core operation (through its errno, the crate's one mapping).
fn nfs_status(e: &FsError) -> u32 {
    match e.errno() {
        libc::ENOENT => status::NOENT,
        libc::ENOTDIR => status::NOTDIR,
        libc::EISDIR => status::ISDIR,
        libc::EINVAL => status::INVAL,
        libc::EROFS => status::ROFS,
        libc::EACCES | libc::EPERM => status::ACCES,
        libc::ENAMETOOLONG => status::NAMETOOLONG,
        libc::ENODATA | libc::ENOTSUP => status::NOTSUPP,
        _ => status::IO,
    }
}

/// What the server learns from the MOUNT protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MountEvent {
    /// A client mounted this path of the tree.
    Mounted(String),
    /// A client said it unmounted this path (`UMNT`), or everything (`UMNTALL`: `None`).
    Unmounted(Option<String>),
}

/// A reply: `head` (the RPC reply and the result, up to a READ's data) then `data` and its
/// XDR padding.
pub(crate) struct Reply {
    pub(crate) head: Vec<u8>,
    pub(crate) data: Bytes,
}

impl Reply {
    /// The padding to write after `data`.
    pub(crate) fn padding(&self) -> &'static [u8] {
        &[0u8; 3][..super::xdr::pad(self.data.len())]
    }
}

/// The NFS and MOUNT service over one tree.
pub(crate) struct Service {
    pub(crate) fs: std::sync::Arc<Fs>,
    /// Tells this server's handles from another's (its start time and process id).
    instance: u64,
    /// The TCP port NFS and MOUNT are served on (for GETPORT).
    port: u16,
    /// Told of every MNT, UMNT and UMNTALL.
    events: Box<dyn Fn(MountEvent) + Send + Sync>,
}

/// The handles' layout: instance, inode, generation.
const HANDLE_LEN: usize = 24;

impl Service {
    pub(crate) fn new(
        fs: std::sync::Arc<Fs>,
        port: u16,
        events: Box<dyn Fn(MountEvent) + Send + Sync>,
    ) -> Self {
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self::with_instance(
            fs,
            port,
            events,
            nanos ^ (u64::from(std::process::id()) << 32),
        )
    }

    /// A service whose handles carry `instance` (the fuzz target's is fixed, so that its seeds'
    /// handles stay valid).
    pub(crate) fn with_instance(
        fs: std::sync::Arc<Fs>,
        port: u16,
        events: Box<dyn Fn(MountEvent) + Send + Sync>,
        instance: u64,
    ) -> Self {
        Service {
            fs,
            instance,
            port,
            events,
        }
    }

    fn handle(&self, ino: u64, generation: u64) -> [u8; HANDLE_LEN] {
        let mut h = [0u8; HANDLE_LEN];
        h[..8].copy_from_slice(&self.instance.to_be_bytes());
        h[8..16].copy_from_slice(&ino.to_be_bytes());
        h[16..].copy_from_slice(&generation.to_be_bytes());
        h
    }

    /// The inode a handle names, if it still names it.
    fn inode(&self, h: &[u8]) -> Result<u64, u32> {
        let Ok(h) = <[u8; HANDLE_LEN]>::try_from(h) else {
            return Err(status::BADHANDLE);
        };
        let word = |i: usize| {
            u64::from_be_bytes([
                h[i],
                h[i + 1],
                h[i + 2],
                h[i + 3],
                h[i + 4],
                h[i + 5],
                h[i + 6],
                h[i + 7],
            ])
        };
        let (instance, ino, generation) = (word(0), word(8), word(16));
        if instance != self.instance || !self.fs.is_current(ino, generation) {
            return Err(status::STALE);
        }
        Ok(ino)
    }

    fn attr(&self, ino: u64) -> Option<Attr> {
        self.fs.getattr(ino).ok()
    }

    /// Answers one call (a whole RPC record). `None`: the record is not a call (too short for
    /// its xid and message type, or a REPLY, which a server never gets): no reply is owed, and
    /// the connection is closed (the peer is not an RPC client that can be answered).
    pub(crate) fn call(&self, record: &[u8]) -> Option<Reply> {
        let mut r = Reader::new(record);
        let xid = r.u32().ok()?;
        if r.u32().ok()? != 0 {
            // A REPLY: a server gets none.
            return None;
        }
        let mut w = Writer::with_capacity(256);
        let Ok((rpcvers, prog, vers, proc_)) = call_header(&mut r) else {
            reply_header(&mut w, xid, accept::GARBAGE_ARGS);
            return Some(done(w));
        };
        if rpcvers != 2 {
            // MSG_DENIED, RPC_MISMATCH, versions 2 to 2.
            w.u32(xid).u32(1).u32(1).u32(0).u32(2).u32(2);
            return Some(done(w));
        }
        let versions = match prog {
            NFS | MOUNT => 3,
            PORTMAP => 2,
            _ => {
                reply_header(&mut w, xid, accept::PROG_UNAVAIL);
                return Some(done(w));
            }
        };
        if vers != versions {
            reply_header(&mut w, xid, accept::PROG_MISMATCH);
            w.u32(versions).u32(versions);
            return Some(done(w));
        }
        log::trace!("nfs: call {xid}: program {prog}, procedure {proc_}");
        reply_header(&mut w, xid, accept::SUCCESS);
        let start = w.len();
        let result = match prog {
            NFS => self.nfs(proc_, &mut r, &mut w),
            MOUNT => self.mount(proc_, &mut r, &mut w),
            _ => self.portmap(proc_, &mut r, &mut w),
        };
        match result {
            Ok(Some(data)) => Some(Reply { head: w.buf, data }),
            Ok(None) => Some(done(w)),
            Err(u) => {
                // The accept_stat written (SUCCESS) is replaced, and what followed it dropped.
                w.buf.truncate(start - 4);
                w.u32(match u {
                    Unanswered::Garbage => accept::GARBAGE_ARGS,
                    Unanswered::NoProc => accept::PROC_UNAVAIL,
                });
                Some(done(w))
            }
        }
    }

    fn nfs(&self, proc_: u32, r: &mut Reader, w: &mut Writer) -> Answer {
        match proc_ {
            0 => Ok(None),
            1 => self.getattr(r, w),
            3 => self.lookup(r, w),
            4 => self.access(r, w),
            5 => self.readlink(r, w),
            6 => self.read(r, w),
            16 => self.readdir(r, w, false),
            17 => self.readdir(r, w, true),
            18 => self.fsstat(r, w),
            19 => self.fsinfo(r, w),
            20 => self.pathconf(r, w),
            // What would write: SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR,
            // RENAME, LINK, COMMIT. Their arguments are not read; each failure's body is its
            // empty `wcc_data` (two absent attributes), RENAME's two of them, LINK's an absent
            // attribute and one.
            2 | 7..=13 | 21 => {
                w.u32(status::ROFS).u32(0).u32(0);
                Ok(None)
            }
            14 => {
                w.u32(status::ROFS).u32(0).u32(0).u32(0).u32(0);
                Ok(None)
            }
            15 => {
                w.u32(status::ROFS).u32(0).u32(0).u32(0);
                Ok(None)
            }
            _ => Err(Unanswered::NoProc),
        }
    }

    /// The file handle argument, or the failure with an empty `post_op_attr` after its status.
    fn arg_inode(&self, r: &mut Reader, w: &mut Writer) -> Result<Option<u64>, Unanswered> {
        let h = r.opaque(FHSIZE3)?;
        match self.inode(h) {
            Ok(ino) => Ok(Some(ino)),
            Err(s) => {
                w.u32(s).u32(0);
                Ok(None)
            }
        }
    }

    fn getattr(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let h = r.opaque(FHSIZE3)?;
        match self
            .inode(h)
            .and_then(|ino| self.fs.getattr(ino).map_err(|e| nfs_status(&e)))
        {
            Ok(a) => {
                w.u32(status::OK);
                fattr(w, &a);
            }
            Err(s) => {
                w.u32(s);
            }
        }
        Ok(None)
    }

    fn lookup(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let Some(dir) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        let name = r.opaque(MAX_NAME)?;
        match self.fs.lookup(dir, name) {
            Ok(a) => {
                w.u32(status::OK).opaque(&self.handle(a.ino, a.generation));
                post_op_attr(w, Some(&a));
                post_op_attr(w, self.attr(dir).as_ref());
            }
            Err(e) => {
                w.u32(nfs_status(&e));
                post_op_attr(w, self.attr(dir).as_ref());
            }
        }
        Ok(None)
    }

    fn access(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let Some(ino) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        let asked = r.u32()?;
        match self.fs.getattr(ino) {
            Ok(a) => {
                // READ 0x1, LOOKUP 0x2, EXECUTE 0x20: by the permission bits; never MODIFY,
                // EXTEND or DELETE.
                let mut allowed = 0;
                if a.perm & 0o444 != 0 {
                    allowed |= 0x1;
                }
                if a.perm & 0o111 != 0 {
                    allowed |= if a.kind == Kind::Dir {
                        0x2 | 0x20
                    } else {
                        0x20
                    };
                }
                w.u32(status::OK);
                post_op_attr(w, Some(&a));
                w.u32(asked & allowed);
            }
            Err(e) => {
                w.u32(nfs_status(&e)).u32(0);
            }
        }
        Ok(None)
    }

    fn readlink(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let Some(ino) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        let a = self.attr(ino);
        match self.fs.readlink(ino) {
            Ok(target) => {
                w.u32(status::OK);
                post_op_attr(w, a.as_ref());
                w.opaque(&target);
            }
            Err(e) => {
                w.u32(nfs_status(&e));
                post_op_attr(w, a.as_ref());
            }
        }
        Ok(None)
    }

    fn read(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let Some(ino) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        let offset = r.u64()?;
        let count = r.u32()?.min(RTMAX);
        let a = match self.fs.getattr(ino) {
            Ok(a) if a.kind == Kind::Dir => Err((status::ISDIR, Some(a))),
            Ok(a) if a.kind == Kind::Symlink => Err((status::INVAL, Some(a))),
            Ok(a) => Ok(a),
            Err(e) => Err((nfs_status(&e), None)),
        };
        let read = a.and_then(|a| {
            self.fs
                .read_reply(ino, offset, count as usize)
                .map(|data| (a, data))
                .map_err(|e| (nfs_status(&e), Some(a)))
        });
        match read {
            Ok((a, data)) => {
                let eof = offset.saturating_add(data.len() as u64) >= a.size;
                w.u32(status::OK);
                post_op_attr(w, Some(&a));
                w.u32(data.len() as u32).bool(eof).u32(data.len() as u32);
                Ok(Some(data))
            }
            Err((s, a)) => {
                w.u32(s);
                post_op_attr(w, a.as_ref());
                Ok(None)
            }
        }
    }

    fn readdir(&self, r: &mut Reader, w: &mut Writer, plus: bool) -> Answer {
        let Some(dir) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        let cookie = r.u64()?;
        r.fixed(8)?;
        // READDIR's `count`; READDIRPLUS's `dircount` (the entries' names, ids and cookies)
        // and `maxcount` (the whole reply).
        let (dircount, maxcount) = if plus {
            (r.u32()? as usize, r.u32()? as usize)
        } else {
            let c = r.u32()? as usize;
            (c, c)
        };
        let maxcount = maxcount.min(DIR_REPLY_MAX);
        let dir_attr = match self.fs.getattr(dir) {
            Ok(a) if a.kind != Kind::Dir => {
                w.u32(status::NOTDIR);
                post_op_attr(w, Some(&a));
                return Ok(None);
            }
            Ok(a) => a,
            Err(e) => {
                w.u32(nfs_status(&e)).u32(0);
                return Ok(None);
            }
        };
        // status, dir attributes, verifier, the list's end, eof.
        let fixed = 4 + 4 + FATTR3_LEN + 8 + 4 + 4;
        let mut entries = Writer::with_capacity(maxcount.min(64 << 10));
        let (mut size, mut names, mut n, mut full) = (fixed, 0usize, 0usize, false);
        let mut add = |name: &[u8], ino: u64, cookie: u64, attr: Option<Attr>, generation| {
            let info = 8 + opaque_len(name.len()) + 8;
            let plus_len = if plus {
                4 + attr.map_or(0, |_| FATTR3_LEN) + 4 + opaque_len(HANDLE_LEN)
            } else {
                0
            };
            let len = 4 + info + plus_len;
            if size + len > maxcount || (n > 0 && plus && names + info > dircount) {
                full = true;
                return true;
            }
            size += len;
            names += info;
            n += 1;
            entries.bool(true).u64(ino).opaque(name).u64(cookie);
            if plus {
                post_op_attr(&mut entries, attr.as_ref());
                entries.bool(true).opaque(&self.handle(ino, generation));
            }
            false
        };
        let listed = if plus {
            self.fs.readdir_plus(dir, cookie, |e, a| {
                add(&e.name, e.ino, e.cookie, a, e.generation)
            })
        } else {
            self.fs.readdir(dir, cookie, |e| {
                add(&e.name, e.ino, e.cookie, None, e.generation)
            })
        };
        if let Err(e) = listed {
            w.u32(nfs_status(&e));
            post_op_attr(w, Some(&dir_attr));
            return Ok(None);
        }
        if full && n == 0 {
            w.u32(status::TOOSMALL);
            post_op_attr(w, Some(&dir_attr));
            return Ok(None);
        }
        w.u32(status::OK);
        post_op_attr(w, Some(&dir_attr));
        w.fixed(&[0; 8]);
        w.buf.extend_from_slice(&entries.buf);
        w.bool(false).bool(!full);
        Ok(None)
    }

    fn fsstat(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let Some(ino) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        let total = self.fs.total_bytes();
        w.u32(status::OK);
        post_op_attr(w, self.attr(ino).as_ref());
        // Bytes: total, free, free to the user; files: the same; `invarsec` 0 (may change).
        w.u64(total).u64(0).u64(0).u64(0).u64(0).u64(0).u32(0);
        Ok(None)
    }

    fn fsinfo(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let Some(ino) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        w.u32(status::OK);
        post_op_attr(w, self.attr(ino).as_ref());
        // rtmax, rtpref, rtmult; wtmax, wtpref, wtmult; dtpref; maxfilesize; time_delta;
        // properties: FSF3_SYMLINK | FSF3_HOMOGENEOUS.
        w.u32(RTMAX).u32(RTMAX).u32(4096);
        w.u32(64 << 10).u32(64 << 10).u32(4096);
        w.u32(64 << 10)
            .u64(u64::MAX >> 1)
            .u32(0)
            .u32(1)
            .u32(0x2 | 0x8);
        Ok(None)
    }

    fn pathconf(&self, r: &mut Reader, w: &mut Writer) -> Answer {
        let Some(ino) = self.arg_inode(r, w)? else {
            return Ok(None);
        };
        w.u32(status::OK);
        post_op_attr(w, self.attr(ino).as_ref());
        // linkmax, name_max, no_trunc, chown_restricted, case_insensitive, case_preserving.
        w.u32(1)
            .u32(255)
            .bool(true)
            .bool(true)
            .bool(false)
            .bool(true);
        Ok(None)
    }

    fn mount(&self, proc_: u32, r: &mut Reader, w: &mut Writer) -> Answer {
        match proc_ {
            0 => Ok(None),
            1 => {
                let path = r.opaque(MNTPATHLEN)?;
                match self.walk(path) {
                    Ok(a) => {
                        // MNT3_OK, the handle, and the flavors: AUTH_UNIX, AUTH_NONE.
                        w.u32(0).opaque(&self.handle(a.ino, a.generation));
                        w.u32(2).u32(1).u32(0);
                        (self.events)(MountEvent::Mounted(
                            String::from_utf8_lossy(path).into_owned(),
                        ));
                    }
                    Err(s) => {
                        w.u32(s);
                    }
                }
                Ok(None)
            }
            // DUMP: no list of who mounted what is kept.
            2 => {
                w.bool(false);
                Ok(None)
            }
            3 => {
                let path = r.opaque(MNTPATHLEN)?;
                (self.events)(MountEvent::Unmounted(Some(
                    String::from_utf8_lossy(path).into_owned(),
                )));
                Ok(None)
            }
            4 => {
                (self.events)(MountEvent::Unmounted(None));
                Ok(None)
            }
            // EXPORT: `/` to everyone.
            5 => {
                w.bool(true).opaque(b"/").bool(false).bool(false);
                Ok(None)
            }
            _ => Err(Unanswered::NoProc),
        }
    }

    /// The directory at `path` (components separated by `/`), for MNT.
    fn walk(&self, path: &[u8]) -> Result<Attr, u32> {
        let mut a = self.fs.getattr(ROOT).map_err(|e| nfs_status(&e))?;
        for c in path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
        {
            if c == b".." {
                return Err(status::ACCES);
            }
            a = self.fs.lookup(a.ino, c).map_err(|e| nfs_status(&e))?;
        }
        if a.kind != Kind::Dir {
            return Err(status::NOTDIR);
        }
        Ok(a)
    }

    fn portmap(&self, proc_: u32, r: &mut Reader, w: &mut Writer) -> Answer {
        match proc_ {
            0 => Ok(None),
            3 => {
                let (prog, vers, prot) = (r.u32()?, r.u32()?, r.u32()?);
                let _port = r.u32()?;
                // Over TCP (6), NFS and MOUNT version 3 are here; nothing else is.
                let ours = matches!(prog, NFS | MOUNT) && vers == 3 && prot == 6;
                w.u32(if ours { u32::from(self.port) } else { 0 });
                Ok(None)
            }
            _ => Err(Unanswered::NoProc),
        }
    }
}

/// Why a call got no result of its procedure.
enum Unanswered {
    Garbage,
    NoProc,
}

impl From<Garbage> for Unanswered {
    fn from(_: Garbage) -> Self {
        Unanswered::Garbage
    }
}

/// A procedure's result: written to the writer, and a READ's data to send after it.
type Answer = Result<Option<Bytes>, Unanswered>;

/// Reads a call's header after the xid and message type: the RPC version, program, version,
/// procedure; the credentials and verifier are read and not used (AUTH_NONE and AUTH_UNIX are
/// both served: what the tree shows is readable by its mode bits alone).
fn call_header(r: &mut Reader) -> Result<(u32, u32, u32, u32), Garbage> {
    let (rpcvers, prog, vers, proc_) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
    for _ in 0..2 {
        let _flavor = r.u32()?;
        r.opaque(MAX_AUTH)?;
    }
    Ok((rpcvers, prog, vers, proc_))
}

/// An accepted reply's header: xid, REPLY, MSG_ACCEPTED, a null verifier, `stat`.
fn reply_header(w: &mut Writer, xid: u32, stat: u32) {
    w.u32(xid).u32(1).u32(0).u32(0).u32(0).u32(stat);
}

fn done(w: Writer) -> Reply {
    Reply {
        head: w.buf,
        data: Bytes::new(),
    }
}

fn post_op_attr(w: &mut Writer, a: Option<&Attr>) {
    match a {
        Some(a) => {
            w.bool(true);
            fattr(w, a);
        }
        None => {
            w.bool(false);
        }
    }
}

/// Seconds and nanoseconds since the epoch (0 before it).
fn nfstime(t: SystemTime) -> (u32, u32) {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or((0, 0), |d| {
            (
                d.as_secs().min(u64::from(u32::MAX)) as u32,
                d.subsec_nanos(),
            )
        })
}

/// `fattr3`: as FUSE's attributes show the node (the same mode bits, size, ids and time).
fn fattr(w: &mut Writer, a: &Attr) {
    let (kind, nlink) = match a.kind {
        Kind::File => (1, 1),
        Kind::Dir => (2, 2),
        Kind::Symlink => (5, 1),
    };
    let (s, ns) = nfstime(a.mtime);
    w.u32(kind)
        .u32(u32::from(a.perm) & 0o7777)
        .u32(nlink)
        .u32(a.uid)
        .u32(a.gid)
        .u64(a.size)
        .u64(a.size)
        .u32(0)
        .u32(0)
        // fsid: one file system.
        .u64(0x0074_666d_6f75_6e74)
        .u64(a.ino);
    for _ in 0..3 {
        w.u32(s).u32(ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fattr3_has_its_size() {
        let a = Attr {
            ino: 5,
            size: 9,
            kind: Kind::File,
            perm: 0o444,
            mtime: SystemTime::UNIX_EPOCH,
            uid: 1,
            gid: 2,
            generation: 0,
        };
        let mut w = Writer::default();
        fattr(&mut w, &a);
        assert_eq!(w.len(), FATTR3_LEN);
    }
}
