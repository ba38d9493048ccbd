//! `fuser::Filesystem` over [`Fs`]: translation, and where a read waits. Every callback is
//! `match fs.op(..) { Ok(x) => reply.x(..), Err(e) => reply.error(errno) }`; errno values come
//! from `FsError::errno` (ENOSYS, which switches kernel features off, is the only one made here).
//! Reads of a remote mount run on a small pool of their own (`Waiters`), so that one waiting
//! for the network does not hold a thread serving the kernel's lookups and `stat`s.

use crate::sync::lock;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyOpen, ReplyStatfs,
    ReplyXattr, Request, SessionUnmounter,
};

use crate::error::FsError;
use crate::fs::live::Invalidate;
use crate::fs::{Attr, Fs, Kind};

/// The mount never changes and every size is exact from the first `stat`, so the kernel may
/// cache names and attributes for long.
const TTL: Duration = Duration::from_secs(24 * 3600);
/// Kernel readahead for sequential reads of large tensors (see `mount::raise_readahead`): one
/// request of the largest size the kernel sends (256 pages). Measured on a cold 1 GiB read,
/// 1 MiB costs least CPU (dd + daemon) and time: -15% against 128 KiB, while 2 and 4 MiB
/// (more requests in flight than the two serving threads) cost more than 1 MiB.
pub const MAX_READAHEAD: u32 = 1 << 20;

/// Which files the kernel reads around its page cache (`-o direct_io`): the policy, in the core.
pub(crate) use crate::fs::DirectIo;
/// The smallest tensor file `-o direct_io=auto` reads around the page cache.
pub use crate::fs::DIRECT_IO_MIN;

/// The `st_blksize` of a file read with direct I/O: `cat`, `cp` and Python's buffered files
/// read this much per call (each call is one READ request), instead of 128 or 256 KiB.
pub const DIRECT_IO_BLKSIZE: u32 = MAX_READAHEAD;

/// Threads that reads of a remote mount wait for the network on, at most.
const MAX_WAITERS: usize = 16;
/// A waiter idle this long ends.
const WAITER_IDLE: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce() + Send>;

/// The threads reads of a remote mount run on: a read that waits for the network (up to
/// `remote_timeout`) holds one of these, not one of the few threads serving the kernel, so
/// that 16 readers of a stalled server each fail within `remote_timeout` instead of queueing
/// behind each other (each waiting its turn for a serving thread), and lookups and `stat`s
/// are answered meanwhile. Threads are started as reads need them, at most [`MAX_WAITERS`]
/// (then reads queue), and end when idle.
struct Waiters {
    state: Mutex<WaitState>,
    work: std::sync::Condvar,
}

#[derive(Default)]
struct WaitState {
    jobs: std::collections::VecDeque<Job>,
    idle: usize,
    threads: usize,
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, WaitState> {
        lock(&self.state)
    }

    fn run(self: &Arc<Self>, job: Job) {
        let mut g = self.lock();
        g.jobs.push_back(job);
        if g.idle > g.jobs.len() - 1 {
            self.work.notify_one();
            return;
        }
        if g.threads < MAX_WAITERS {
            let me = Arc::clone(self);
            if std::thread::Builder::new()
                .name("tfmount-read".into())
                .spawn(move || me.serve())
                .is_ok()
            {
                g.threads += 1;
                return;
            }
        }
        // No thread could start: the next free one takes it.
        self.work.notify_one();
    }

    fn serve(&self) {
        let mut g = self.lock();
        loop {
            if let Some(job) = g.jobs.pop_front() {
                drop(g);
                job();
                g = self.lock();
                continue;
            }
            g.idle += 1;
            let (next, timeout) = self
                .work
                .wait_timeout(g, WAITER_IDLE)
                .unwrap_or_else(|e| e.into_inner());
            g = next;
            g.idle -= 1;
            if timeout.timed_out() && g.jobs.is_empty() {
                g.threads -= 1;
                return;
            }
        }
    }
}

pub(crate) struct FuseFs {
    fs: Arc<Fs>,
    /// Where reads run when the source is remote (`None`: on the serving thread).
    waiters: Option<Arc<Waiters>>,
    /// Which files are opened with `FOPEN_DIRECT_IO` (`Never` once `init` found that the
    /// kernel cannot `mmap` them).
    direct_io: DirectIo,
    /// The largest READ request seen, in bytes (logged at the end of the session).
    largest_read: AtomicU32,
    /// The kernel opens directories without asking (`FUSE_NO_OPENDIR_SUPPORT`).
    no_opendir: bool,
    /// The kernel opens files without asking (`FUSE_NO_OPEN_SUPPORT`).
    no_open: bool,
    /// An editable mount (`-o edit`): opens, flushes and releases reach the daemon, and the
    /// kernel keeps neither names nor attributes (each edit may change them).
    edit: bool,
    /// The session's unmounter, set once the session exists (see [`FuseFs::unmounter`]).
    unmounter: Arc<Mutex<Option<SessionUnmounter>>>,
}

impl FuseFs {
    pub(crate) fn new(fs: Arc<Fs>, direct_io: DirectIo) -> Self {
        FuseFs {
            waiters: fs.is_remote().then(|| {
                Arc::new(Waiters {
                    state: Mutex::new(WaitState::default()),
                    work: std::sync::Condvar::new(),
                })
            }),
            edit: fs.editing().is_some(),
            fs,
            direct_io,
            largest_read: AtomicU32::new(0),
            no_opendir: false,
            no_open: false,
            unmounter: Arc::default(),
        }
    }

    /// Where the mount code puts the session's unmounter. At the end of the session
    /// ([`Filesystem::destroy`]) the mount is released through it, so that the session does
    /// not try to unmount again what `fusermount3 -u` or a signal already unmounted (fuser
    /// would log a warning, `Failed to umount filesystem: Invalid argument`, at every clean
    /// stop).
    pub(crate) fn unmounter(&self) -> Arc<Mutex<Option<SessionUnmounter>>> {
        self.unmounter.clone()
    }

    /// An entry reply (LOOKUP, MKDIR): the kernel then holds one more lookup of the inode, in
    /// this generation (inode numbers of pruned checkpoints are reused with the next one); one
    /// freed since it was resolved (a pruned checkpoint) is ENOENT.
    fn entry_reply(&self, r: Result<Attr, FsError>, reply: ReplyEntry) {
        match r {
            Ok(a) if self.fs.looked_up(a.ino, a.generation) => reply.entry_with_ttls(
                &self.ttl(),
                &self.ttl(),
                &self.attr(&a),
                Generation(a.generation),
            ),
            Ok(_) => reply.error(errno(&FsError::NotFound)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    /// How long the kernel keeps names and attributes: a day, none on an editable mount.
    fn ttl(&self) -> Duration {
        if self.edit {
            Duration::ZERO
        } else {
            TTL
        }
    }

    /// What an OPEN reply lets the kernel keep: on an editable mount, nothing (a view's
    /// content changes with each edit).
    fn keep(&self, f: FopenFlags) -> FopenFlags {
        if self.edit {
            f - (FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR)
        } else {
            f
        }
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn file_attr(a: &Attr) -> FileAttr {
    file_attr_with(a, 4096)
}

fn file_attr_with(a: &Attr, blksize: u32) -> FileAttr {
    let kind = match a.kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    };
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind,
        perm: a.perm,
        nlink: 1,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize,
        flags: 0,
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
    }
}

impl FuseFs {
    /// Whether file `ino` of `size` bytes is read with direct I/O.
    fn direct(&self, ino: u64, size: u64) -> bool {
        // The size first: under `auto` most files are small, and their content is not asked.
        match self.direct_io {
            DirectIo::Never => false,
            DirectIo::Auto if size < DIRECT_IO_MIN => false,
            d => d.applies(self.fs.content(ino), size),
        }
    }

    /// The attributes the kernel gets: a file read with direct I/O announces a block size of
    /// one full READ request (see [`DIRECT_IO_BLKSIZE`]).
    /// So does a file an editable mount takes writes to: `cp` and numpy then write it in
    /// requests of 1 MiB, not 128 KiB (a WRITE is a round trip each).
    fn attr(&self, a: &Attr) -> FileAttr {
        let writable = self.edit && a.perm & 0o200 != 0;
        if a.kind == Kind::File && (writable || self.direct(a.ino, a.size)) {
            file_attr_with(a, DIRECT_IO_BLKSIZE)
        } else {
            file_attr(a)
        }
    }
}

impl Filesystem for FuseFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Never more than the kernel offers (its default, 128 KiB); `raise_readahead` does more.
        let _ = config.set_max_readahead(MAX_READAHEAD);
        // READDIRPLUS always (not "auto"): a listing hands the kernel every entry's attributes,
        // so `find`, `ls -l` and the opens that follow need no LOOKUP per name.
        let wanted = InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_DO_READDIRPLUS;
        let _ = config.add_capabilities(wanted & config.capabilities());
        // Opening needs no state, so where the kernel can open without a request, let it:
        // `opendir`/`open` answer ENOSYS once, and from then on the kernel opens directories
        // with FOPEN_KEEP_CACHE | FOPEN_CACHE_DIR and files with FOPEN_KEEP_CACHE by itself,
        // exactly what we would answer. That saves an OPEN and a RELEASE per file. A file whose
        // content cannot be produced is listed with a size above 0 (`fs::BROKEN_SIZE`), so its
        // READ still reaches us and fails with EIO instead of reading as an empty file.
        let caps = config.capabilities();
        self.no_opendir = !self.edit && caps.contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        // Direct I/O is chosen per file in the OPEN reply, so it needs OPEN requests: for
        // every file (the no-open mode is per mount). `mmap` of a direct-I/O file (numpy's
        // `mmap_mode`, safetensors) needs FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6): without it a
        // shared mapping fails with ENODEV, so there the mount keeps the page cache.
        if self.direct_io != DirectIo::Never {
            if caps.contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
                let _ = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
            } else {
                log::warn!(
                    "-o direct_io: this kernel cannot mmap direct-I/O files (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6); every file keeps the page cache"
                );
                self.direct_io = DirectIo::Never;
            }
        }
        self.no_open = !self.edit
            && self.direct_io == DirectIo::Never
            && caps.contains(InitFlags::FUSE_NO_OPEN_SUPPORT);
        Ok(())
    }

    fn destroy(&mut self) {
        let largest = self.largest_read.load(Ordering::Relaxed);
        if largest > 0 {
            log::info!("largest READ request: {largest} bytes");
        }
        let taken = self.unmounter.lock().ok().and_then(|mut u| u.take());
        if let Some(mut u) = taken {
            if let Err(e) = u.unmount() {
                log::debug!("unmount at the end of the session: {e}");
            }
        }
    }

    /// No ioctl is supported: ENOTTY, as for a regular file (Python's `open()` asks TCGETS to
    /// see whether it is a terminal), logged at debug only.
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        log::debug!("ioctl {cmd:#x} on inode {ino:?}: ENOTTY");
        reply.error(Errno::ENOTTY);
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry_reply(self.fs.lookup(parent.0, name.as_bytes()), reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&self.ttl(), &self.attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.acc_mode() != OpenAccMode::O_RDONLY {
            let trunc = flags.0 & libc::O_TRUNC != 0;
            // Direct I/O: what is written goes to the daemon only, never into the pages of the
            // file as it is (which its readers keep reading whole until the close replaces it).
            return match self.fs.open_write(ino.0, trunc) {
                Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
                Err(e) => reply.error(errno(&e)),
            };
        }
        if self.no_open {
            return reply.error(Errno::ENOSYS);
        }
        match self.fs.open(ino.0) {
            Ok(a) if a.kind == Kind::Dir => reply.error(errno(&FsError::IsDir)),
            // KEEP_CACHE with DIRECT_IO too: what an `mmap` of the file cached stays valid
            // (the mount never changes), so an open elsewhere does not drop it.
            Ok(a) if self.direct(a.ino, a.size) => reply.opened(
                FileHandle(0),
                self.keep(FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_KEEP_CACHE),
            ),
            Ok(_) => reply.opened(FileHandle(0), self.keep(FopenFlags::FOPEN_KEEP_CACHE)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        self.largest_read.fetch_max(size, Ordering::Relaxed);
        let read =
            move |fs: &Fs, reply: ReplyData| match fs.read_reply(ino.0, offset, size as usize) {
                Ok(buf) => reply.data(&buf),
                Err(e) => reply.error(errno(&e)),
            };
        match &self.waiters {
            Some(w) => {
                let fs = Arc::clone(&self.fs);
                w.run(Box::new(move || read(&fs, reply)));
            }
            None => read(&self.fs, reply),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if !self.edit {
            // Nothing to flush; ENOSYS makes the kernel stop sending FLUSH on every close.
            return reply.error(Errno::ENOSYS);
        }
        empty_reply(self.fs.flush_write(fh.0), reply);
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty_reply(self.fs.fsync_write(fh.0), reply);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.fs.release_write(fh.0);
        reply.ok();
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        match self.fs.write(fh.0, offset, data) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        match self.fs.create(parent.0, name.as_bytes()) {
            Ok((fh, Some(a))) if self.fs.looked_up(a.ino, a.generation) => reply.created(
                &self.ttl(),
                &self.attr(&a),
                Generation(a.generation),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Ok((fh, _)) => {
                self.fs.release_write(fh);
                reply.error(errno(&FsError::NotFound))
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Only a size, through a handle being written, changes anything; times and modes
        // are taken as they are (cp -p, editors) and left.
        let r = match (size, fh) {
            (Some(s), Some(fh)) if self.fs.is_writing(fh.0) => self.fs.truncate(fh.0, s),
            (Some(s), _) if self.edit => self.fs.truncate_ino(ino.0, s),
            (Some(_), _) => Err(FsError::ReadOnly),
            (None, _) if self.edit => Ok(()),
            (None, _) => Err(FsError::ReadOnly),
        };
        match r.and_then(|()| self.fs.getattr(ino.0)) {
            Ok(a) => reply.attr(&self.ttl(), &self.attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty_reply(self.fs.unlink(parent.0, name.as_bytes()), reply);
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry_reply(self.fs.mkdir(parent.0, name.as_bytes()), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty_reply(self.fs.rmdir(parent.0, name.as_bytes()), reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !flags.is_empty() {
            // RENAME_NOREPLACE, RENAME_EXCHANGE: not done (mv falls back to a plain rename).
            return reply.error(Errno::EINVAL);
        }
        let r = self
            .fs
            .rename(parent.0, name.as_bytes(), newparent.0, newname.as_bytes());
        empty_reply(r, reply);
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        empty_reply(self.fs.setxattr(ino.0, name.as_bytes(), value), reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        match self.fs.getattr(ino.0) {
            Ok(a) if a.kind == Kind::Dir => reply.opened(
                FileHandle(0),
                self.keep(FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR),
            ),
            Ok(_) => reply.error(errno(&FsError::NotDir)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.fs.readdir(ino.0, offset, |e| {
            reply.add(
                INodeNo(e.ino),
                e.cookie,
                file_type(e.kind),
                OsStr::from_bytes(&e.name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.fs.readdir_plus(ino.0, offset, |e, a| {
            let name = OsStr::from_bytes(&e.name);
            // The kernel links (or forgets) every entry of a READDIRPLUS reply but `.` and
            // `..`: counted before it is added, and left out if its subtree was freed since it
            // was listed (a pruned checkpoint).
            let counted = e.name != b"." && e.name != b"..";
            if counted && !self.fs.looked_up(e.ino, e.generation) {
                return false;
            }
            let generation = Generation(e.generation);
            let full = match a {
                Some(a) => reply.add(
                    INodeNo(e.ino),
                    e.cookie,
                    name,
                    &self.ttl(),
                    &self.attr(&a),
                    generation,
                ),
                // Unknown attributes: name and type only, not to be cached.
                None => {
                    let a = Attr {
                        ino: e.ino,
                        size: 0,
                        kind: e.kind,
                        perm: 0,
                        mtime: std::time::UNIX_EPOCH,
                        uid: 0,
                        gid: 0,
                        generation: e.generation,
                    };
                    let zero = Duration::ZERO;
                    reply.add(
                        INodeNo(e.ino),
                        e.cookie,
                        name,
                        &zero,
                        &file_attr(&a),
                        generation,
                    )
                }
            };
            // Not added: the reply is full.
            if full && counted {
                self.fs.forget(e.ino, 1);
            }
            full
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = self.fs.total_bytes().div_ceil(4096);
        reply.statfs(blocks, 0, 0, 0, 0, 4096, 255, 4096);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(self.fs.getxattr(ino.0, name.as_bytes()), size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(self.fs.listxattr(ino.0), size, reply);
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        if mask.contains(fuser::AccessFlags::W_OK) && !self.edit {
            return reply.error(errno(&FsError::ReadOnly));
        }
        match self.fs.getattr(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// An empty reply: `ok`, or the error's errno.
fn empty_reply(r: Result<(), FsError>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

fn xattr_reply(r: Result<Vec<u8>, FsError>, size: u32, reply: ReplyXattr) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(errno(&FsError::Range)),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(errno(&e)),
    }
}

/// What a live directory's watcher calls after a change: drops the kernel's cached names,
/// attributes and listings through fuser's notifier.
pub(crate) fn invalidator(n: fuser::Notifier) -> Box<dyn Fn(Invalidate) + Send> {
    Box::new(move |inv| {
        let r = match &inv {
            Invalidate::Entry { parent, name } => {
                n.inval_entry(INodeNo(*parent), OsStr::from_bytes(name))
            }
            Invalidate::Inode(ino) => n.inval_inode(INodeNo(*ino), 0, 0),
        };
        // ENOENT: the kernel had nothing cached for it.
        if let Err(e) = r {
            if e.raw_os_error() != Some(libc::ENOENT) {
                log::debug!("invalidating {inv:?}: {e}");
            }
        }
    })
}
