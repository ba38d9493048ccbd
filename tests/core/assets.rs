//! A SavedModel's `assets/` and `assets.extra/`: nothing outside the SavedModel's directory is
//! ever served; symlinks that stay inside are followed, the others are shown as symlinks with
//! their stored target; loops end; nothing is listed at mount, so a deep or huge `assets/` costs
//! nothing until it is used (and descriptors stay bounded when it is). Through the core, `tfmount
//! ls -R`, and a real mount.

use crate::common;

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::hostile::scratch;
use common::walk::{self, show, Core, Dir, Walk};
use common::*;
use tfmount::error::FsError;
use tfmount::fs::assets::MAX_DEPTH;
use tfmount::fs::{Kind, ROOT};

/// The content of every file outside the model: found in nothing the mount serves.
const SECRET: &[u8] = b"OUTSIDE-THE-MODEL-7d1e";

fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

/// A copy of `demo_savedmodel` at `tmp/model`, with `tmp/outside/` beside it (files holding
/// [`SECRET`]).
fn model(tmp: &Path) -> PathBuf {
    let src = fixtures().join("demo_savedmodel");
    let m = tmp.join("model");
    for rel in [
        "saved_model.pb",
        "fingerprint.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
        "assets/vocab.txt",
    ] {
        std::fs::create_dir_all(m.join(rel).parent().expect("parent")).expect("mkdir");
        std::fs::copy(src.join(rel), m.join(rel)).expect("copy");
    }
    let out = tmp.join("outside");
    std::fs::create_dir_all(out.join("dir")).expect("mkdir");
    std::fs::write(out.join("secret.txt"), SECRET).expect("secret");
    std::fs::write(out.join("dir/secret2.txt"), SECRET).expect("secret");
    m
}

/// The hostile assets tree: symlinks out of the model (absolute, relative, to `/`, through the
/// model and out, out and back in), loops (`a -> .`, `up -> ..`, two links to each other, two
/// directories linking to each other), a chain inside (followed), a dangling link, a FIFO, and
/// `assets.extra` itself a symlink out.
fn hostile_model(tmp: &Path) -> PathBuf {
    let m = model(tmp);
    let a = m.join("assets");
    let out = tmp.join("outside");
    symlink(out.join("secret.txt"), a.join("out"));
    symlink("../../outside/secret.txt", a.join("out_rel"));
    symlink("../../outside/dir", a.join("out_dir"));
    symlink("sub/../../../outside/secret.txt", a.join("out_via_in"));
    symlink("../../model/assets/vocab.txt", a.join("escape_back"));
    symlink("/", a.join("rootlink"));
    symlink(".", a.join("a"));
    symlink("..", a.join("up"));
    symlink("../..", a.join("top"));
    std::fs::create_dir_all(a.join("sub/deeper")).expect("mkdir");
    std::fs::write(a.join("sub/deeper/real.txt"), b"inside\n").expect("write");
    symlink("c2", a.join("c1"));
    symlink("sub/c3", a.join("c2"));
    symlink("deeper/real.txt", a.join("sub/c3"));
    symlink(m.join("assets/vocab.txt"), a.join("abs_in"));
    symlink("sub", a.join("subl"));
    symlink("../variables", a.join("vars"));
    std::fs::create_dir_all(a.join("x")).expect("mkdir");
    std::fs::create_dir_all(a.join("y")).expect("mkdir");
    symlink("../y", a.join("x/l"));
    symlink("../x", a.join("y/m"));
    symlink("nowhere", a.join("dangling"));
    symlink("loop2", a.join("loop1"));
    symlink("loop1", a.join("loop2"));
    mkfifo(&a.join("fifo"));
    symlink(out.join("dir"), m.join("assets.extra"));
    m
}

/// What the hostile tree shows: path -> (`d`, `f` with content, or `l` with target).
fn hostile_want(tmp: &Path) -> BTreeMap<String, (char, Vec<u8>)> {
    let vocab = std::fs::read(fixtures().join("demo_savedmodel/assets/vocab.txt")).expect("vocab");
    let out = tmp.join("outside");
    let s = |p: &Path| p.as_os_str().as_bytes().to_vec();
    let l = |t: &str| ('l', t.as_bytes().to_vec());
    let f = |c: &[u8]| ('f', c.to_vec());
    let d = ('d', Vec::new());
    let inside = b"inside\n";
    let vars = fixtures().join("demo_savedmodel/variables");
    let index = std::fs::read(vars.join("variables.index")).expect("index");
    let data = std::fs::read(vars.join("variables.data-00000-of-00001")).expect("data");
    let mut w: BTreeMap<String, (char, Vec<u8>)> = [
        ("assets", d.clone()),
        ("assets/a", l(".")),
        ("assets/abs_in", f(&vocab)),
        ("assets/c1", f(inside)),
        ("assets/c2", f(inside)),
        ("assets/dangling", l("nowhere")),
        ("assets/escape_back", l("../../model/assets/vocab.txt")),
        ("assets/loop1", l("loop2")),
        ("assets/loop2", l("loop1")),
        ("assets/out", ('l', s(&out.join("secret.txt")))),
        ("assets/out_dir", l("../../outside/dir")),
        ("assets/out_rel", l("../../outside/secret.txt")),
        ("assets/out_via_in", l("sub/../../../outside/secret.txt")),
        ("assets/rootlink", l("/")),
        ("assets/top", l("../..")),
        ("assets/up", l("..")),
        ("assets/vars", d.clone()),
        ("assets/vars/variables.data-00000-of-00001", f(&data)),
        ("assets/vars/variables.index", f(&index)),
        ("assets/vocab.txt", f(&vocab)),
        ("assets/x", d.clone()),
        ("assets/x/l", d.clone()),
        ("assets/x/l/m", l("../x")),
        ("assets/y", d.clone()),
        ("assets/y/m", d.clone()),
        ("assets/y/m/l", l("../y")),
        ("assets.extra", ('l', s(&out.join("dir")))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    for sub in ["sub", "subl"] {
        w.insert(format!("assets/{sub}"), d.clone());
        w.insert(format!("assets/{sub}/c3"), f(inside));
        w.insert(format!("assets/{sub}/deeper"), d.clone());
        w.insert(format!("assets/{sub}/deeper/real.txt"), f(inside));
    }
    w
}

/// What a walk found under `assets` and `assets.extra`, in the terms of [`hostile_want`].
fn found<H>(tree: &BTreeMap<Vec<u8>, walk::Node<H>>) -> BTreeMap<String, (char, Vec<u8>)> {
    tree.iter()
        .filter(|(p, _)| p.starts_with(b"assets"))
        .map(|(p, n)| {
            let v = match n.kind {
                Kind::Dir => ('d', Vec::new()),
                Kind::Symlink => ('l', n.link.clone().unwrap_or_default()),
                Kind::File => match &n.data {
                    Some(Ok(b)) => ('f', b.clone()),
                    other => panic!("{}: {other:?}", show(p)),
                },
            };
            (show(p), v)
        })
        .collect()
}

/// No file anywhere in a walk holds the bytes of a file outside the model.
fn assert_nothing_outside<H>(tree: &BTreeMap<Vec<u8>, walk::Node<H>>) {
    for (p, n) in tree {
        if let Some(Ok(b)) = &n.data {
            assert!(
                !b.windows(SECRET.len()).any(|w| w == SECRET),
                "{}: outside bytes served",
                show(p)
            );
        }
    }
}

/// Through the core: the whole tree walked (every file read): exactly the expected entries, and
/// not one byte of a file outside the model.
#[test]
fn outside_links_are_symlinks_inside_links_are_followed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let m = hostile_model(tmp.path());
    let t0 = Instant::now();
    let fs = open_fs(&m).expect("mount");
    let mounted = t0.elapsed();
    let tree = walk::walk(
        &Core::strict(&fs),
        &Walk {
            read: true,
            ..Walk::default()
        },
    );
    assert_nothing_outside(&tree);
    let want = hostile_want(tmp.path());
    let got = found(&tree);
    for (p, w) in &want {
        assert_eq!(got.get(p), Some(w), "{p}");
    }
    let extra: Vec<&String> = got.keys().filter(|p| !want.contains_key(*p)).collect();
    assert!(extra.is_empty(), "not expected: {extra:?}");
    // A symlink's content through `read` is its target, never what it points to.
    let out = fs.lookup(fs.lookup(ROOT, b"assets").expect("assets").ino, b"out");
    assert_eq!(out.expect("out").kind, Kind::Symlink);
    assert!(mounted < Duration::from_secs(2), "mount took {mounted:?}");
}

/// `tfmount ls -R` shows the same tree (and ends).
#[test]
fn ls_recursive_shows_the_same() {
    let tmp = tempfile::tempdir().expect("tmp");
    let m = hostile_model(tmp.path());
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["ls", "-lR"])
        .arg(&m)
        .arg("assets")
        .output()
        .expect("tfmount ls");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut got = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let v = match f[0] {
            "d" => ('d', Vec::new()),
            "l" => ('l', f[3].as_bytes().to_vec()),
            _ => ('f', f[1].as_bytes().to_vec()),
        };
        got.insert(format!("assets/{}", f[2]), v);
    }
    let want: BTreeMap<String, (char, Vec<u8>)> = hostile_want(tmp.path())
        .into_iter()
        .filter(|(p, _)| p.starts_with("assets/"))
        .map(|(p, (k, v))| match k {
            'f' => (p, ('f', v.len().to_string().into_bytes())),
            _ => (p, (k, v)),
        })
        .collect();
    assert_eq!(got, want);
}

/// Through the kernel: the tree walked without following symlinks, every file read: the same
/// entries, no outside bytes; the outside symlinks read back their stored targets.
#[test]
fn through_a_real_mount() {
    let tmp = tempfile::tempdir().expect("tmp");
    let m = hostile_model(tmp.path());
    let mut mnt = Mount::start(&m, &[]);
    let root = mnt.path();
    let tree = walk::walk(
        &Dir::new(&root),
        &Walk {
            read: true,
            ..Walk::default()
        },
    );
    assert_nothing_outside(&tree);
    let want = hostile_want(tmp.path());
    let got = found(&tree);
    assert_eq!(got, want);
    assert_eq!(
        std::fs::read_link(root.join("assets/rootlink")).expect("readlink"),
        Path::new("/")
    );
    assert_eq!(
        std::fs::read(root.join("assets/c1")).expect("c1"),
        b"inside\n"
    );
    assert_eq!(mnt.unmount(), Some(0), "{}", mnt.log_text());
}

/// `depth` directories `d` nested in `dir` (made through descriptors: the path outgrows
/// PATH_MAX).
fn nest(dir: &Path, depth: usize) {
    let f = std::fs::File::open(dir).expect("open");
    let mut fd = OwnedFd::from(f);
    for _ in 0..depth {
        let r = unsafe { libc::mkdirat(fd.as_raw_fd(), c"d".as_ptr(), 0o755) };
        assert_eq!(r, 0, "mkdirat");
        let n = unsafe {
            libc::openat(
                fd.as_raw_fd(),
                c"d".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        assert!(n >= 0, "openat");
        fd = unsafe { OwnedFd::from_raw_fd(n) };
    }
}

/// Removes what [`nest`] made: down to the deepest, then up through `..`, removing each `d`
/// (two descriptors at a time).
fn unnest(dir: &Path) {
    let mut fd = OwnedFd::from(std::fs::File::open(dir).expect("open"));
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let mut depth = 0;
    loop {
        let n = unsafe { libc::openat(fd.as_raw_fd(), c"d".as_ptr(), flags) };
        if n < 0 {
            break;
        }
        fd = unsafe { OwnedFd::from_raw_fd(n) };
        depth += 1;
    }
    for _ in 0..depth {
        let p = unsafe { libc::openat(fd.as_raw_fd(), c"..".as_ptr(), flags) };
        assert!(p >= 0, "openat ..");
        fd = unsafe { OwnedFd::from_raw_fd(p) };
        let r = unsafe { libc::unlinkat(fd.as_raw_fd(), c"d".as_ptr(), libc::AT_REMOVEDIR) };
        assert_eq!(r, 0, "unlinkat");
    }
}

/// A deep tree made by [`nest`], removed when dropped (a temporary directory could not be).
struct Deep(PathBuf);

impl Deep {
    fn new(dir: PathBuf, depth: usize) -> Deep {
        std::fs::create_dir(&dir).expect("mkdir");
        nest(&dir, depth);
        Deep(dir)
    }
}

impl Drop for Deep {
    fn drop(&mut self) {
        unnest(&self.0);
    }
}

const DEPTH: usize = 10_000;
const HUGE: usize = 20_000;

/// 10,000 nested directories and a directory of 20,000 files: the mount opens nothing of them
/// (it comes up in milliseconds); the deep tree is shown down to `MAX_DEPTH` levels (reached by
/// lookups), every file of the huge one read, with the descriptors the mount holds bounded
/// throughout.
#[test]
fn deep_and_huge_cost_nothing_until_listed() {
    let tmp = scratch();
    let m = model(tmp.path());
    let _deep = Deep::new(m.join("assets/deep"), DEPTH);
    let huge = m.join("assets/huge");
    std::fs::create_dir(&huge).expect("mkdir");
    for i in 0..HUGE {
        std::fs::write(huge.join(format!("f{i:05}")), format!("{i}\n")).expect("write");
    }
    let fds0 = open_fds_under(&m);
    let t0 = Instant::now();
    let fs = open_fs(&m).expect("mount");
    let mounted = t0.elapsed();
    let fds_mounted = open_fds_under(&m);
    eprintln!(
        "mount of {DEPTH} nested directories and {HUGE} files: {mounted:?}, {} descriptors",
        fds_mounted - fds0
    );
    assert!(mounted < Duration::from_secs(1), "mount took {mounted:?}");
    assert!(
        fds_mounted - fds0 <= 8,
        "{} descriptors at mount",
        fds_mounted - fds0
    );

    let assets = fs.lookup(ROOT, b"assets").expect("assets").ino;
    let t1 = Instant::now();
    let mut ino = fs.lookup(assets, b"deep").expect("deep").ino;
    // `deep` is level 1 below assets/; levels past MAX_DEPTH are not shown.
    for _ in 1..MAX_DEPTH {
        ino = fs.lookup(ino, b"d").expect("d").ino;
    }
    assert!(matches!(fs.lookup(ino, b"d"), Err(FsError::NotFound)));
    eprintln!("{MAX_DEPTH} lookups down: {:?}", t1.elapsed());
    let bound = fds0 + 8 + tfmount::source::dirtree::DIR_FDS + tfmount::fs::assets::OPEN_FILES;
    assert!(
        open_fds_under(&m) <= bound,
        "{} descriptors",
        open_fds_under(&m)
    );

    let t2 = Instant::now();
    let h = fs.lookup(assets, b"huge").expect("huge").ino;
    let mut names = Vec::new();
    fs.readdir(h, 0, |e| {
        names.push(e);
        false
    })
    .expect("readdir");
    assert_eq!(names.len(), HUGE + 2);
    eprintln!("{HUGE} files listed: {:?}", t2.elapsed());
    for e in names.iter().filter(|e| e.name.starts_with(b"f")) {
        let i: usize = show(&e.name[1..]).parse().expect("n");
        assert_eq!(
            fs.read(e.ino, 0, 64).expect("read"),
            format!("{i}\n").as_bytes()
        );
    }
    eprintln!("{HUGE} files listed and read: {:?}", t2.elapsed());
    assert!(
        open_fds_under(&m) <= bound,
        "{} descriptors",
        open_fds_under(&m)
    );
}

/// A real mount of a deep assets tree comes up as fast, and its top levels list; `tfmount ls -R`
/// lists it down to `MAX_DEPTH` levels.
#[test]
fn deep_tree_mounts_at_once() {
    let tmp = scratch();
    let m = model(tmp.path());
    let _deep = Deep::new(m.join("assets/deep"), DEPTH);
    let t0 = Instant::now();
    let mut mnt = Mount::start(&m, &[]);
    let mounted = t0.elapsed();
    eprintln!("real mount with {DEPTH} nested asset directories: {mounted:?}");
    assert!(mounted < Duration::from_secs(5), "{mounted:?}");
    let p = mnt.path().join("assets/deep/d/d/d/d");
    assert!(p.is_dir());
    assert_eq!(std::fs::read_dir(&p).expect("list").count(), 1, "one d");
    assert_eq!(mnt.unmount(), Some(0), "{}", mnt.log_text());
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["ls", "-R"])
        .arg(&m)
        .arg("assets/deep")
        .output()
        .expect("tfmount ls");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    assert_eq!(lines, MAX_DEPTH as usize - 1);
}
