//! The NFSv3 adapter (`tfmount --nfs-serve`, `--nfs`) checked with a client nobody here wrote:
//! libnfs's `nfs-ls` and `nfs-cat` (Debian's libnfs-utils). Every conformance fixture's tree
//! over NFS is its FUSE tree, name for name and byte for byte; a 100,000-entry directory is
//! listed once per name, in pages, and resumes at any cookie; 16 readers of random ranges get
//! exact bytes; a live directory's new checkpoint appears and a pruned one's handles are stale;
//! a damaged tensor is an I/O error; hostile records close their connection only. What libnfs's
//! tools cannot do (hold a handle, read a range, resume at a cookie) goes through
//! `common::nfs::Rpc`, a minimal caller.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::nfs::{nfs_cat, nfs_ls, Listed, NfsServer, Rpc, NFS3ERR_IO, NFS3ERR_STALE};
use common::{f32_bytes, Mount};
use tfmount::parse::dtype::DType;
use tfmount::testkit::requires;
use tfmount::testkit::writer::CheckpointWriter;

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn have_all(test: &str) -> bool {
    requires::fuse(test) && requires::program("nfs-ls", &[], test).is_some()
}

/// Every entry under `root` (symbolic links not followed), as `nfs-ls -R` lists them.
fn fuse_walk(root: &Path) -> Vec<Listed> {
    fn go(root: &Path, rel: &Path, out: &mut Vec<Listed>) {
        let mut entries: Vec<_> = std::fs::read_dir(root.join(rel))
            .unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
            .map(|e| e.expect("entry"))
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let r = rel.join(e.file_name());
            let m = std::fs::symlink_metadata(root.join(&r)).expect("lstat");
            let kind = if m.is_dir() {
                'd'
            } else if m.file_type().is_symlink() {
                'l'
            } else {
                '-'
            };
            out.push(Listed {
                path: r.as_os_str().as_bytes().to_vec(),
                kind,
                // A directory's size is 0 in both (its st_size).
                size: if kind == 'd' { 0 } else { m.len() },
            });
            if kind == 'd' {
                go(root, &r, out);
            }
        }
    }
    let mut out = Vec::new();
    go(root, Path::new(""), &mut out);
    out.sort();
    out
}

/// The tree of `source` over NFS equals its tree over FUSE: the same entries, kinds and sizes,
/// every file's bytes. Returns how many files were compared.
fn same_over_nfs_and_fuse(source: &Path) -> usize {
    let fuse = Mount::start(source, &[]);
    let server = NfsServer::start(source, &[]);
    let want = fuse_walk(&fuse.path());
    let mut got = nfs_ls(server.url(""), true)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", source.display(), server.log_text()));
    for l in &mut got {
        if l.kind == 'd' {
            l.size = 0;
        }
    }
    got.sort();
    assert_eq!(
        got,
        want,
        "{}: nfs-ls -R against the FUSE walk",
        source.display()
    );
    let mut files = 0;
    for l in want.iter().filter(|l| l.kind == '-') {
        let a = nfs_cat(server.url(&l.path))
            .unwrap_or_else(|e| panic!("{}: {}: nfs-cat: {e}", source.display(), show(&l.path)));
        let b = std::fs::read(fuse.path().join(std::ffi::OsStr::from_bytes(&l.path)))
            .expect("read through FUSE");
        assert!(
            a == b,
            "{}: {}: bytes differ",
            source.display(),
            show(&l.path)
        );
        files += 1;
    }
    files
}

#[test]
fn the_nfs_tree_is_the_fuse_tree_for_every_fixture() {
    if !have_all("") {
        return;
    }
    let mut sources = common::conformance_sources();
    sources.push(common::fixtures().join("demo_savedmodel"));
    sources.push(common::fixtures().join("tf1_adam"));
    let mut files = 0;
    for s in &sources {
        files += same_over_nfs_and_fuse(s);
    }
    assert!(files > 500, "{files} files compared");
    eprintln!(
        "{} sources, {files} files: the same over NFS and FUSE",
        sources.len()
    );
}

const DT_FLOAT: DType = DType(1);

/// A checkpoint of `n` one-element float32 tensors `t00000`, `t00001`, ...: `variables/` then
/// holds 4n entries.
fn many_tensors(dir: &Path, n: usize) -> PathBuf {
    let prefix = dir.join("ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    for i in 0..n {
        w.add(
            format!("t{i:05}").as_bytes(),
            DT_FLOAT,
            &[1],
            &f32_bytes(&[i as f32]),
            0,
        )
        .expect("add");
    }
    w.finish().expect("finish");
    prefix
}

#[test]
fn a_100k_entry_directory_is_listed_once_per_name_and_resumes_at_any_cookie() {
    if requires::program("nfs-ls", &[], "").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = many_tensors(dir.path(), 25_000);
    let want: BTreeSet<String> = (0..25_000)
        .flat_map(|i| ["bin", "npy", "shape", "dtype"].map(|s| format!("t{i:05}.{s}")))
        .collect();
    let server = NfsServer::start(&prefix, &[]);
    // libnfs, in its own page size.
    let listed = nfs_ls(server.url("variables"), false).expect("nfs-ls");
    assert_eq!(listed.len(), 100_000, "names listed");
    let names: BTreeSet<String> = listed.iter().map(|l| show(&l.path)).collect();
    assert_eq!(names.len(), 100_000, "each name once");
    assert!(names == want, "the names of the tensors' files");
    // In small pages (4 KiB replies: ~120 names each), by READDIR.
    let mut rpc = Rpc::connect(server.port);
    let root = rpc.mnt("/").expect("mnt");
    let vars = rpc.lookup(&root, "variables").expect("variables");
    let all = rpc.list(&vars, 4096);
    let names: Vec<&String> = all.iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 100_000);
    assert_eq!(
        names.iter().copied().cloned().collect::<BTreeSet<_>>(),
        want,
        "each name once, in pages"
    );
    // MNT takes any directory of the tree, and only a directory.
    assert!(
        rpc.mnt("/variables").is_ok_and(|h| h == vars),
        "the same handle"
    );
    assert_eq!(rpc.mnt("/variables/t00000.bin"), Err(20), "NOTDIR");
    assert_eq!(rpc.mnt("/nothing"), Err(2), "NOENT");
    // Resumed at any entry's cookie: the listing goes on with the next entry.
    let mut rng = common::Rng::new(7);
    for _ in 0..50 {
        let i = rng.index(all.len() - 1);
        let (page, _) = rpc.readdir(&vars, all[i].1, 1024).expect("readdir");
        assert_eq!(page[0], all[i + 1], "after cookie {}", all[i].1);
    }
    let (page, eof) = rpc
        .readdir(&vars, all[all.len() - 1].1, 1024)
        .expect("readdir at the last cookie");
    assert!(page.is_empty() && eof, "nothing after the last entry");
}

#[test]
fn sixteen_readers_of_random_ranges_get_exact_bytes() {
    if requires::program("nfs-cat", &[], "").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (prefix, expect) = common::synthetic::write_model(dir.path(), 4096);
    let big = expect
        .values()
        .max_by_key(|e| e.bin.len())
        .expect("a tensor")
        .clone();
    assert!(big.bin.len() >= 4 << 20, "a 4 MiB tensor");
    let path = format!("variables/{}.bin", String::from_utf8_lossy(&big.key));
    let server = NfsServer::start(&prefix, &[]);
    let port = server.port;
    let readers: Vec<_> = (0..16u64)
        .map(|t| {
            let (path, want) = (path.clone(), big.bin.clone());
            std::thread::spawn(move || {
                let mut rpc = Rpc::connect(port);
                let root = rpc.mnt("/").expect("mnt");
                let fh = rpc.walk(&root, &path).expect("the tensor's file");
                let mut rng = common::Rng::new(t);
                for _ in 0..40 {
                    let off = rng.below(want.len() as u64);
                    let len = 1 + rng.below(1 << 20);
                    let (got, eof) = rpc.read(&fh, off, len as u32).expect("read");
                    let end = (off + len).min(want.len() as u64) as usize;
                    assert!(got == want[off as usize..end], "bytes at {off}+{len}");
                    assert_eq!(eof, end == want.len());
                }
                // And the whole file, by libnfs.
                let url = format!("nfs://127.0.0.1//{path}?nfsport={port}&mountport={port}");
                assert!(nfs_cat(&url).expect("nfs-cat") == want, "nfs-cat");
            })
        })
        .collect();
    for r in readers {
        r.join().expect("a reader");
    }
}

fn write_ckpt(dir: &Path, name: &str, v: f32) {
    let mut w = CheckpointWriter::new(dir.join(name), 1).expect("writer");
    w.add(b"v", DT_FLOAT, &[1], &f32_bytes(&[v]), 0)
        .expect("add");
    w.finish().expect("finish");
}

#[test]
fn a_live_directory_grows_and_a_pruned_checkpoint_is_stale() {
    if requires::program("nfs-ls", &[], "").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    write_ckpt(dir.path(), "ckpt-1", 1.0);
    common::write_state(dir.path(), &["ckpt-1"]);
    let server = NfsServer::start(dir.path(), &[]);
    let mut rpc = Rpc::connect(server.port);
    let root = rpc.mnt("/").expect("mnt");
    let old = rpc
        .walk(&root, "ckpt-1/variables/v.bin")
        .expect("ckpt-1's tensor");
    assert_eq!(rpc.read(&old, 0, 4).expect("read").0, f32_bytes(&[1.0]));
    write_ckpt(dir.path(), "ckpt-2", 2.0);
    common::write_state(dir.path(), &["ckpt-1", "ckpt-2"]);
    common::within(Duration::from_secs(5), "ckpt-2 over NFS", || {
        nfs_ls(server.url(""), false).is_ok_and(|l| l.iter().any(|e| e.path == b"ckpt-2"))
    });
    assert_eq!(
        nfs_cat(server.url("ckpt-2/variables/v.bin")).expect("nfs-cat"),
        f32_bytes(&[2.0])
    );
    // TensorFlow's max_to_keep: ckpt-1's files go, the state file no longer names it.
    for e in std::fs::read_dir(dir.path()).expect("readdir") {
        let p = e.expect("entry").path();
        if p.file_name()
            .is_some_and(|n| n.as_bytes().starts_with(b"ckpt-1."))
        {
            std::fs::remove_file(p).expect("rm");
        }
    }
    common::write_state(dir.path(), &["ckpt-2"]);
    common::within(Duration::from_secs(5), "ckpt-1 gone over NFS", || {
        nfs_ls(server.url(""), false).is_ok_and(|l| !l.iter().any(|e| e.path == b"ckpt-1"))
    });
    assert_eq!(
        rpc.getattr(&old),
        Err(NFS3ERR_STALE),
        "a pruned file's handle"
    );
    assert_eq!(rpc.read(&old, 0, 4).map(|r| r.0), Err(NFS3ERR_STALE));
    // The root's handle is still good.
    assert!(rpc.getattr(&root).is_ok());
}

#[test]
fn a_damaged_tensor_is_an_io_error_logged_once() {
    if requires::program("nfs-cat", &[], "").is_none() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let prefix = dir.path().join("ckpt");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    w.add(b"bad", DT_FLOAT, &[2], &f32_bytes(&[3.0, 4.0]), 0)
        .expect("add");
    w.add(b"good", DT_FLOAT, &[2], &f32_bytes(&[1.0, 2.0]), 0)
        .expect("add");
    w.finish().expect("finish");
    // `bad` is stored first (tensors in the order added): its first byte flipped.
    let data = dir.path().join("ckpt.data-00000-of-00001");
    let mut bytes = std::fs::read(&data).expect("data");
    bytes[0] ^= 0xff;
    std::fs::write(&data, bytes).expect("write");
    let mut server = NfsServer::start(&prefix, &[]);
    let e = nfs_cat(server.url("variables/bad.bin")).expect_err("a damaged tensor");
    // nfs-cat says only "Failed to read from file"; the status is checked below.
    assert!(e.contains("Failed to read"), "{e}");
    assert_eq!(
        nfs_cat(server.url("variables/good.bin")).expect("the good one"),
        f32_bytes(&[1.0, 2.0])
    );
    let mut rpc = Rpc::connect(server.port);
    let root = rpc.mnt("/").expect("mnt");
    let fh = rpc.walk(&root, "variables/bad.bin").expect("lookup");
    assert_eq!(rpc.read(&fh, 0, 8).map(|r| r.0), Err(NFS3ERR_IO));
    assert_eq!(server.stop(), Some(0), "SIGTERM stops the server cleanly");
    let log = server.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(lines.len(), 1, "one line for the damaged tensor:\n{log}");
    assert!(lines[0].contains("bad"), "{}", lines[0]);
}

#[test]
fn hostile_records_close_their_connection_and_nothing_else() {
    if requires::program("nfs-cat", &[], "").is_none() {
        return;
    }
    let source = common::fixtures().join("demo_savedmodel");
    let server = NfsServer::start(&source, &[]);
    // A fragment claiming 2 GiB: the connection is closed, nothing allocated for it.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    use std::io::{Read, Write};
    s.write_all(&0xffff_ffffu32.to_be_bytes()).expect("write");
    let mut buf = [0u8; 16];
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    assert_eq!(s.read(&mut buf).ok(), Some(0), "closed");
    // Garbage arguments: GARBAGE_ARGS (accept_stat 4), and the connection goes on.
    let mut rpc = Rpc::connect(server.port);
    let call = common::nfs::X::default()
        .u32(9)
        .u32(0)
        .u32(2)
        .u32(common::nfs::NFS)
        .u32(3)
        .u32(6)
        .u32(0)
        .u32(0)
        .u32(0)
        .u32(0)
        .u32(0xffff_fff0);
    let reply = rpc.raw(&call.0).expect("a reply");
    assert_eq!(&reply[20..24], &4u32.to_be_bytes(), "GARBAGE_ARGS");
    let mut rng = common::Rng::new(3);
    for n in 0..300 {
        let n_junk = rng.index(200);
        let junk = rng.bytes(n_junk);
        // A call header, then junk (and sometimes junk only).
        let rec = if n % 3 == 0 {
            junk
        } else {
            let mut c = common::nfs::X::default()
                .u32(n)
                .u32(0)
                .u32(2)
                .u32(if n % 2 == 0 {
                    common::nfs::NFS
                } else {
                    common::nfs::MOUNT
                })
                .u32(3)
                .u32(n % 23)
                .0;
            c.extend_from_slice(&junk);
            c
        };
        if rpc.raw(&rec).is_none() {
            rpc = Rpc::connect(server.port);
        }
    }
    // The server still serves.
    assert!(nfs_cat(server.url("saved_model.pbtxt")).is_ok_and(|b| !b.is_empty()));
}

#[test]
fn nfs_mounting_without_an_nfs_client_says_what_it_ran() {
    if Path::new("/proc/filesystems").exists()
        && std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\tnfs\n"))
    {
        eprintln!("this machine has a kernel NFS client: see the walk through it");
        return;
    }
    let mp = tempfile::tempdir().expect("tempdir");
    let out = common::tfmount(&[
        "--nfs".as_ref(),
        common::fixtures().join("demo_savedmodel").as_os_str(),
        mp.path().as_os_str(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("mount -t nfs -o ro,vers=3") && err.contains(&mp.path().display().to_string()),
        "names the command and the mount point: {err}"
    );
    assert!(!common::is_mounted(mp.path()));
}

#[test]
fn through_the_kernel_nfs_client_where_there_is_one() {
    let has = std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| f.contains("\tnfs\n"));
    if !has {
        eprintln!("skipped: this machine's kernel has no NFS client (no nfs in /proc/filesystems): the walk through `mount -t nfs` is not checked here");
        return;
    }
    let source = common::fixtures().join("demo_savedmodel");
    let mp = tempfile::tempdir().expect("tempdir");
    let out = common::tfmount(&["--nfs".as_ref(), source.as_os_str(), mp.path().as_os_str()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fuse = Mount::start(&source, &[]);
    assert_eq!(fuse_walk(mp.path()), fuse_walk(&fuse.path()));
    common::same_tree(mp.path(), &fuse.path());
    let out = common::tfmount(&["umount".as_ref(), mp.path().as_os_str()]);
    assert!(out.status.success());
}
