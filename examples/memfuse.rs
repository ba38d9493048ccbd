//! The FUSE baseline for `scripts/bench.sh`: a minimal `fuser` filesystem serving a copy, held
//! in memory, of a file or a directory tree, with the kernel settings tfmount uses (READDIRPLUS,
//! files and directories opened without a request, 24 h caching, the same readahead). Whatever
//! tfmount costs beyond this program is tfmount's; what this program costs is FUSE's on this
//! kernel.
//!
//! With `--direct-io` it answers OPEN and opens every file with `FOPEN_DIRECT_IO` (and asks for
//! `FUSE_DIRECT_IO_ALLOW_MMAP`, with the block size tfmount announces for such files): the
//! baseline of tfmount's `-o direct_io`.
//!
//! ```text
//! cargo run --release --example memfuse -- [--direct-io] SRC MOUNTPOINT   # foreground; Ctrl-C unmounts
//! ```

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyData, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, Request,
};

const TTL: Duration = Duration::from_secs(24 * 3600);

enum Node {
    Dir {
        parent: u64,
        children: Vec<(Vec<u8>, u64)>,
    },
    File {
        data: Vec<u8>,
    },
}

struct MemFs {
    nodes: Vec<Node>,
    /// Open files with `FOPEN_DIRECT_IO` (`--direct-io`).
    direct_io: bool,
}

impl MemFs {
    fn load(src: &Path, direct_io: bool) -> std::io::Result<MemFs> {
        let mut fs = MemFs {
            nodes: Vec::new(),
            direct_io,
        };
        if src.is_dir() {
            fs.nodes.push(Node::Dir {
                parent: 1,
                children: Vec::new(),
            });
            fs.load_dir(src, 1)?;
        } else {
            // A single file `data` in the root.
            fs.nodes.push(Node::Dir {
                parent: 1,
                children: vec![(b"data".to_vec(), 2)],
            });
            fs.nodes.push(Node::File {
                data: std::fs::read(src)?,
            });
        }
        Ok(fs)
    }

    fn load_dir(&mut self, dir: &Path, ino: u64) -> std::io::Result<()> {
        let mut entries: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(dir)?
            .map(|e| e.map(|e| (e.path(), e.file_name().as_bytes().to_vec())))
            .collect::<Result<_, _>>()?;
        entries.sort_by(|a, b| a.1.cmp(&b.1));
        for (path, name) in entries {
            let child = self.nodes.len() as u64 + 1;
            if path.is_dir() {
                self.nodes.push(Node::Dir {
                    parent: ino,
                    children: Vec::new(),
                });
                self.load_dir(&path, child)?;
            } else {
                self.nodes.push(Node::File {
                    data: std::fs::read(&path)?,
                });
            }
            if let Some(Node::Dir { children, .. }) = self.nodes.get_mut(ino as usize - 1) {
                children.push((name, child));
            }
        }
        Ok(())
    }

    fn node(&self, ino: INodeNo) -> Option<&Node> {
        (ino.0 as usize)
            .checked_sub(1)
            .and_then(|i| self.nodes.get(i))
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, size, perm) = match self.node(INodeNo(ino))? {
            Node::Dir { .. } => (FileType::Directory, 0, 0o555),
            Node::File { data } => (FileType::RegularFile, data.len() as u64, 0o444),
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind,
            perm,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: if self.direct_io && kind == FileType::RegularFile {
                tfmount::fuse::DIRECT_IO_BLKSIZE
            } else {
                4096
            },
            flags: 0,
        })
    }
}

impl Filesystem for MemFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.set_max_readahead(tfmount::fuse::MAX_READAHEAD);
        let wanted = InitFlags::FUSE_CACHE_SYMLINKS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_DO_READDIRPLUS
            | if self.direct_io {
                InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP
            } else {
                InitFlags::empty()
            };
        let _ = config.add_capabilities(wanted & config.capabilities());
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let child = match self.node(parent) {
            Some(Node::Dir { children, .. }) => children
                .iter()
                .find(|(n, _)| n == name.as_bytes())
                .map(|(_, c)| *c),
            _ => None,
        };
        match child.and_then(|c| self.attr(c)) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.direct_io {
            reply.opened(
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_KEEP_CACHE,
            );
        } else {
            reply.error(Errno::ENOSYS);
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.error(Errno::ENOSYS);
    }

    fn flush(&self, _: &Request, _: INodeNo, _: FileHandle, _: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
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
        match self.node(ino) {
            Some(Node::File { data }) => {
                let a = (offset as usize).min(data.len());
                let b = a.saturating_add(size as usize).min(data.len());
                reply.data(&data[a..b]);
            }
            _ => reply.error(Errno::EISDIR),
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
        let Some(Node::Dir { parent, children }) = self.node(ino) else {
            return reply.error(Errno::ENOTDIR);
        };
        let dots = [(b".".to_vec(), ino.0), (b"..".to_vec(), *parent)];
        for (i, (name, child)) in dots
            .iter()
            .chain(children)
            .enumerate()
            .skip(offset as usize)
        {
            let Some(a) = self.attr(*child) else { continue };
            if reply.add(
                INodeNo(*child),
                i as u64 + 1,
                OsStr::from_bytes(name),
                &TTL,
                &a,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let direct_io = args.first().is_some_and(|a| a == "--direct-io");
    if direct_io {
        args.remove(0);
    }
    let [src, mp] = &args[..] else {
        eprintln!("usage: memfuse [--direct-io] SRC MOUNTPOINT");
        std::process::exit(2);
    };
    let fs = match MemFs::load(Path::new(src), direct_io) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("memfuse: {src}: {e}");
            std::process::exit(1);
        }
    };
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("memfuse".into()),
        fuser::MountOption::RO,
    ];
    config.n_threads = Some(2);
    let mp = PathBuf::from(mp);
    let session = match fuser::Session::new(fs, &mp, &config) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("memfuse: mount: {e}");
            std::process::exit(1);
        }
    };
    tfmount::mount::raise_readahead(&mp);
    eprintln!("memfuse: ready");
    if let Err(e) = session.run() {
        eprintln!("memfuse: {e}");
    }
}
