//! The one kit of the test suites (`tests/<suite>/main.rs` each include it as `mod common`):
//! fixtures and their records, real mounts of the built binary and runs of it, the filesystem
//! core opened and read without a kernel, an NPY header reader ([`npy`]), synthetic checkpoints
//! ([`synthetic`]), the hostile-input harness ([`hostile`]), the local object-storage servers
//! ([`servers`]) and the fault-injecting proxy in front of them ([`fault_proxy`]), the allocator
//! that tracks and caps allocations ([`tracking_alloc`], installed by the `formats` suite); and,
//! from the test kit (`tfmount::testkit`), the tree walker ([`walk`]), [`requires`] and the random generator.
//! Each helper is defined here once; a suite uses what it needs.
#![allow(dead_code, unused_imports)]

pub mod fault_proxy;
pub mod hostile;
pub mod nfs;
pub mod npy;
pub mod servers;
pub mod synthetic;
pub mod tracking_alloc;
pub use tfmount::testkit::requires;
pub use tfmount::testkit::rng::Rng;
pub use tfmount::testkit::walk::{self, show};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tfmount::error::FsError;
use tfmount::fs::{Attr, Fs, ROOT};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The Keras fixtures (`tests/fixtures/keras`).
/// Where every conformance fixture is, as `(directory under tests/fixtures, what is opened in
/// it)` (`""`: the directory): the sources `tests/core/conformance.rs` checks (which asserts that
/// its table and this list agree), for the suites that go through every one of them another
/// way (`tests/mount/nfs.rs`).
pub const CONFORMANCE_SOURCES: &[(&str, &str)] = &[
    ("tf2_keras", "ckpt-1"),
    ("all_dtypes", "ckpt"),
    ("partitioned", "model.ckpt"),
    ("sharded", "model.ckpt"),
    ("graphs/tfhub_tf1_module/variables", "variables"),
    ("v1/single", "model.ckpt-2"),
    ("v1/dtypes", "model.ckpt"),
    ("v1/sharded", "model.ckpt-?????-of-00003"),
    ("keras", "model.weights.h5"),
    ("keras", "legacy_model.h5"),
    ("keras", "model.keras"),
    ("keras/sharded", ""),
    ("tfjs/manifest", ""),
    ("tfjs/manifests", "tiny-weights_manifest.json"),
    ("tfjs/manifests", "landmarks-weights_manifest.json"),
    ("tfjs/layers", ""),
    ("tfjs/layers_sharded", ""),
    ("tfjs/graph_uint8", ""),
    ("tflite", "float.tflite"),
    ("tflite", "dynamic_int8.tflite"),
    ("tflite", "with_metadata.tflite"),
    ("orbax/ocdbt/ckpt", ""),
    ("orbax/zarr/ckpt", ""),
    ("orbax/manager/10", ""),
    ("orbax/keras/orbax/1", ""),
    ("safetensors", "all_dtypes.safetensors"),
    ("safetensors/sharded", ""),
];

/// [`CONFORMANCE_SOURCES`] as paths.
pub fn conformance_sources() -> Vec<PathBuf> {
    CONFORMANCE_SOURCES
        .iter()
        .map(|(dir, source)| fixtures().join(dir).join(source))
        .collect()
}

pub fn keras_dir() -> PathBuf {
    fixtures().join("keras")
}

/// The TF.js fixtures (`tests/fixtures/tfjs`).
pub fn tfjs_dir() -> PathBuf {
    fixtures().join("tfjs")
}

/// The TFLite fixtures (`tests/fixtures/tflite`).
pub fn tflite_dir() -> PathBuf {
    fixtures().join("tflite")
}

/// The JSON file at `path`; panics naming it.
pub fn json(path: &Path) -> Value {
    let t = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).expect("manifest.json");
    serde_json::from_str::<Value>(&text)
        .expect("manifest parses")
        .as_array()
        .expect("manifest is a list")
        .clone()
}

pub fn load_json(rel: &str) -> Value {
    let text =
        std::fs::read_to_string(fixtures().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

pub fn sha256_hex(b: &[u8]) -> String {
    hex(&Sha256::digest(b))
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The little-endian bytes of float32 values (a tensor's `.bin`).
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

// ---------------------------------------------------------------------------------------------
// The filesystem core, no kernel
// ---------------------------------------------------------------------------------------------

/// `source` opened as the core of a mount of it, its derived views listed ([`views_listed`]).
pub fn open_fs(source: &Path) -> Result<Fs, String> {
    let probed = tfmount::probe::probe(source).map_err(|e| e.to_string())?;
    Fs::new(&probed, &views_listed()).map_err(|e| e.to_string())
}

/// [`open_fs`]; panics naming the source when it does not open.
pub fn open_fs_ok(source: &Path) -> Fs {
    open_fs(source).unwrap_or_else(|e| panic!("{}: {e}", source.display()))
}

/// The attributes at the `/`-separated `path` below the root (the root itself for an empty
/// path), looked up component by component.
pub fn lookup_path(fs: &Fs, path: &[u8]) -> Result<Attr, FsError> {
    let mut attr = fs.getattr(ROOT)?;
    if path.is_empty() {
        return Ok(attr);
    }
    for comp in path.split(|&b| b == b'/') {
        attr = fs.lookup(attr.ino, comp)?;
    }
    Ok(attr)
}

/// Whether the `/`-separated `path` below the root resolves.
pub fn path_exists(fs: &Fs, path: &[u8]) -> bool {
    lookup_path(fs, path).is_ok()
}

/// The whole file at `path` (reads of 64 KiB), or `None` when the path does not resolve.
pub fn read_path(fs: &Fs, path: &[u8]) -> Option<Vec<u8>> {
    let a = lookup_path(fs, path).ok()?;
    Some(read_all(fs, a.ino, 1 << 16, usize::MAX).expect("read"))
}

/// File `ino` read from offset 0 in reads of `chunk` bytes until one returns nothing or `cap`
/// bytes are read; asserts that no read returns more than was asked.
pub fn read_all(fs: &Fs, ino: u64, chunk: usize, cap: usize) -> Result<Vec<u8>, FsError> {
    let mut out = Vec::new();
    loop {
        let r = fs.read(ino, out.len() as u64, chunk)?;
        assert!(
            r.len() <= chunk,
            "read of {chunk} bytes returned {}",
            r.len()
        );
        if r.is_empty() || out.len() >= cap {
            return Ok(out);
        }
        out.extend_from_slice(&r);
    }
}

pub fn is_mounted(mp: &Path) -> bool {
    let canon = std::fs::canonicalize(mp).unwrap_or_else(|_| mp.to_path_buf());
    tfmount::mount::is_mount_point(&canon)
}

/// A tfmount daemon running in the foreground on a fresh temporary mount point; unmounted on drop.
pub struct Mount {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub log: PathBuf,
}

impl Mount {
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    pub fn start(source: &Path, extra: &[&str]) -> Mount {
        Mount::start_env(source, extra, &[])
    }

    /// As [`Mount::start`], with more environment variables for the daemon.
    pub fn start_env(source: &Path, extra: &[&str], env: &[(String, String)]) -> Mount {
        let dir = tempfile::tempdir().expect("tempdir");
        let mp = dir.path().join("mnt");
        std::fs::create_dir(&mp).expect("mkdir");
        let log = dir.path().join("log");
        let child = Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .arg("-f")
            .args(extra)
            .arg(source)
            .arg(&mp)
            .env("RUST_LOG", "info")
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn tfmount");
        let mut m = Mount {
            dir,
            child: Some(child),
            log,
        };
        let t0 = Instant::now();
        while !is_mounted(&mp) {
            if let Some(status) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!(
                    "tfmount {} exited with {status} before mounting: {}",
                    source.display(),
                    m.log_text()
                );
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{}: mount did not become ready",
                source.display()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        m
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Whether the daemon is still running.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Unmounts and waits for the daemon; returns its exit status code.
    pub fn unmount(&mut self) -> Option<i32> {
        let mp = self.path();
        if is_mounted(&mp) {
            // Quiet: a reader still holding a file makes it busy; Drop then detaches it (-z).
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&mp)
                .stderr(Stdio::null())
                .status();
        }
        let child = self.child.take()?;
        wait_with_timeout(child, Duration::from_secs(10))
    }
}

pub fn wait_with_timeout(mut child: Child, limit: Duration) -> Option<i32> {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return s.code();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let mp = self.path();
        self.unmount();
        if is_mounted(&mp) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&mp)
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// The bytes of a path given as a json record's `npy_path` / `npy_path_hex`, minus `.npy`.
pub fn stem_path(rec: &Value) -> Vec<u8> {
    let p: Vec<u8> = match rec.get("npy_path_hex").and_then(|v| v.as_str()) {
        Some(h) => (0..h.len() / 2)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
            .collect(),
        None => rec["npy_path"]
            .as_str()
            .expect("npy_path")
            .as_bytes()
            .to_vec(),
    };
    p.strip_suffix(b".npy").expect("npy suffix").to_vec()
}

pub fn with_suffix(dir: &Path, stem: &[u8], suffix: &str) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let mut b = stem.to_vec();
    b.extend_from_slice(suffix.as_bytes());
    dir.join(std::ffi::OsStr::from_bytes(&b))
}

/// Every regular file under `dir`, relative, sorted (the shared walker over `std::fs`).
pub fn walk_files(dir: &Path) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut out: Vec<PathBuf> = walk::walk(&walk::Dir::new(dir), &walk::Walk::default())
        .into_iter()
        .filter(|(_, n)| n.kind == tfmount::fs::Kind::File)
        .map(|(p, _)| PathBuf::from(std::ffi::OsStr::from_bytes(&p)))
        .collect();
    out.sort();
    out
}

/// A checkpoint state file naming `names` (the last one current), as TensorFlow writes it.
pub fn state(names: &[&str]) -> String {
    let mut s = format!(
        "model_checkpoint_path: \"{}\"\n",
        names.last().expect("a checkpoint")
    );
    for n in names {
        s.push_str(&format!("all_model_checkpoint_paths: \"{n}\"\n"));
    }
    s
}

/// Writes [`state`] of `names` as `dir/checkpoint`, through a temporary file and a rename (as
/// TensorFlow replaces it).
pub fn write_state(dir: &Path, names: &[&str]) {
    let tmp = dir.join("checkpoint.tmp");
    std::fs::write(&tmp, state(names)).expect("state");
    std::fs::rename(&tmp, dir.join("checkpoint")).expect("rename");
}

/// Core options for tests that walk or read every file of a tree: the derived views listed
/// too (`-o views=visible`), so that they are walked, read and damaged like the rest.
pub fn views_listed() -> tfmount::fs::Options {
    tfmount::fs::Options {
        views_visible: true,
        ..tfmount::fs::Options::default()
    }
}

/// Dtypes numpy holds natively (the ones that get an `.npy` file).
pub const NUMPY_NATIVE: &[&str] = &[
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
    "complex64",
    "complex128",
];

/// Standard base64 (the fixture records hold serialized protos this way).
pub fn b64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let (mut out, mut acc, mut bits) = (Vec::new(), 0u32, 0u32);
    for &c in s.as_bytes().iter().filter(|c| !c.is_ascii_whitespace()) {
        if c == b'=' {
            break;
        }
        acc = (acc << 6) | val(c);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// The bytes of a hex string (`key_hex` of an expected-values record).
pub fn hex_bytes(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

/// The raw key of an expected-values record (`key_hex` when the key is not UTF-8).
pub fn rec_key(rec: &Value) -> Vec<u8> {
    if rec["key_is_hex"].as_bool() == Some(true) {
        hex_bytes(rec["key_hex"].as_str().expect("key_hex"))
    } else {
        rec["key"].as_str().expect("key").as_bytes().to_vec()
    }
}

/// A JSON array of dims (a record's `shape`).
pub fn dims(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("shape")
        .iter()
        .map(|d| d.as_u64().expect("dim"))
        .collect()
}

/// The escaped relative path of a `/`-separated name (checkpoint keys, node names).
pub fn name_path(name: &[u8]) -> Vec<u8> {
    let comps: Vec<&[u8]> = name.split(|&b| b == b'/').collect();
    let last = comps.len() - 1;
    comps
        .iter()
        .enumerate()
        .map(|(i, c)| tfmount::namespace::escape(c, i < last))
        .collect::<Vec<_>>()
        .join(&b'/')
}

/// FNV-1a, 64 bits (offset basis 0xcbf29ce484222325, prime 2^40 + 2^8 + 0xb3), written from its
/// definition (the README's hash of long name components).
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h: u64, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The names in directory `p`, sorted.
pub fn dir_names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(p)
        .expect("readdir")
        .map(|e| e.expect("dirent").file_name().to_string_lossy().to_string())
        .collect();
    v.sort();
    v
}

/// Where the symlink `latest` of mount `mnt` points (empty when there is none).
pub fn latest(mnt: &Path) -> String {
    std::fs::read_link(mnt.join("latest"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Makes a FIFO at `p`.
pub fn mkfifo(p: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).expect("path");
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// The open descriptors of process `pid` (`/proc/PID/fd`).
pub fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The descriptors this process holds open on files under `dir`: those of the code a test runs
/// on `dir`, not the ones the tests running beside it (threads of the same process) hold.
pub fn open_fds_under(dir: &Path) -> usize {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| {
        d.flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(&dir)))
            .count()
    })
}

/// A remote mount's tree is the local one's, file for file and byte for byte (bar the `source:`
/// line of `summary.txt`, [`as_local`]); returns how many files it holds (at least one).
pub fn same_tree(remote: &Path, local: &Path) -> usize {
    let r = walk_files(remote);
    assert_eq!(r, walk_files(local), "the same files");
    assert!(!r.is_empty());
    for p in &r {
        let a = std::fs::read(remote.join(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let a = as_local(p, a);
        let b = std::fs::read(local.join(p)).expect("local");
        assert!(a == b, "{}: bytes differ", p.display());
    }
    r.len()
}

/// Polls `f` until it holds; fails after `limit`. Returns how long it took.
pub fn within(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    loop {
        if f() {
            return t0.elapsed();
        }
        assert!(t0.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `f` holds for all of `d` (polled every 50 ms).
pub fn stays(d: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        assert!(f(), "changed: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The built tfmount binary as a command, with no standard input.
pub fn tfmount_command() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tfmount"));
    c.stdin(Stdio::null());
    c
}

/// Runs the tfmount binary with `args` (no stdin) and returns what it printed and its status.
pub fn tfmount<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Output {
    tfmount_command().args(args).output().expect("run tfmount")
}

/// [`tfmount`] with more environment variables.
pub fn tfmount_env<S, K, V>(args: &[S], env: &[(K, V)]) -> std::process::Output
where
    S: AsRef<std::ffi::OsStr>,
    K: AsRef<std::ffi::OsStr>,
    V: AsRef<std::ffi::OsStr>,
{
    tfmount_command()
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("run tfmount")
}

/// What `tfmount ARGS` wrote to its standard output; panics with its standard error unless it
/// exited 0.
pub fn tfmount_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<u8> {
    let o = tfmount(args);
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert_eq!(
        o.status.code(),
        Some(0),
        "tfmount {}: {}",
        shown.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// The whole file at `path` of a tree the subcommands see (`tfmount::model::open::Tree`), read
/// in MiB pieces; panics naming the path on an error or a short read.
pub fn tree_cat(tree: &tfmount::model::open::Tree, path: &str) -> Vec<u8> {
    let n = tree
        .resolve(path.as_bytes(), true)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let size = tree.open_file(n).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let b = tree
            .read(n, out.len() as u64, 1 << 20)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(!b.is_empty(), "{path}: short read at {}", out.len());
        out.extend_from_slice(&b);
    }
    out
}

/// [`tree_cat`] as UTF-8 text.
pub fn tree_text(tree: &tfmount::model::open::Tree, path: &str) -> String {
    String::from_utf8(tree_cat(tree, path)).expect("utf-8")
}

/// The bytes `tfmount verify` says it checked (its summary line on standard error).
pub fn verified_bytes(stderr: &[u8]) -> u64 {
    let s = String::from_utf8_lossy(stderr);
    let line = s
        .lines()
        .find(|l| l.starts_with("verify: "))
        .unwrap_or_else(|| panic!("no summary line: {s}"));
    line.split(", ")
        .find_map(|f| f.strip_suffix(" bytes"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count: {line}"))
}

/// A command's JSON Lines output (`--json`): one object per non-empty line.
pub fn json_lines(out: &[u8]) -> Vec<Value> {
    out.split(|&c| c == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l)
                .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(l)))
        })
        .collect()
}

/// Reads a whole file through `O_DIRECT`: on a mount, each read reaches the daemon rather than
/// the kernel's page cache (which keeps what was served before: the mounted snapshot).
pub fn read_direct(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read_at(&mut buf, out.len() as u64)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// The inodes the process `pid` holds a read lease on (`/proc/locks`).
pub fn leases_of(pid: u32) -> Vec<u64> {
    let locks = std::fs::read_to_string("/proc/locks").expect("/proc/locks");
    locks
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // `N: LEASE ACTIVE READ PID MAJ:MIN:INODE START END`
            (f.get(1) == Some(&"LEASE") && f.get(4) == Some(&pid.to_string().as_str()))
                .then(|| f.get(5)?.rsplit(':').next()?.parse().ok())
                .flatten()
        })
        .collect()
}

/// A remote mount's file `rel` as a local mount of the same files shows it: its `summary.txt`
/// ends with a `source:` line saying where the bytes are kept (object storage, the disk
/// cache), which a local mount's has not; everything else is byte for byte the same.
pub fn as_local(rel: &Path, mut bytes: Vec<u8>) -> Vec<u8> {
    if rel.file_name().is_some_and(|n| n == "summary.txt") {
        if let Some(at) = bytes.windows(9).rposition(|w| w == b"\nsource: ") {
            bytes.truncate(at);
        }
    }
    bytes
}

/// Runs scripts/export_check.py with `args` in a Python with `modules` (the test virtualenv's:
/// TensorFlow and the readers that judge `export`), its stdout as JSON; `None` (the test
/// skipped, said) without one, or with `TFMOUNT_NO_TF` set.
pub fn export_check(modules: &str, args: &[&std::ffi::OsStr]) -> Option<Value> {
    if std::env::var_os("TFMOUNT_NO_TF").is_some() {
        requires::missing("TensorFlow (TFMOUNT_NO_TF is set)", "");
        return None;
    }
    let py = requires::python(modules, "")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/export_check.py");
    let out = Command::new(&py)
        .arg(script)
        .args(args)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("json"))
}

/// The keys [`export_check`]'s `check` found in one checkpoint (`got[path]["keys"]`).
pub fn checked_keys(g: &Value) -> Vec<&str> {
    g["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k.as_str().expect("a key"))
        .collect()
}

/// TensorFlow's name of a safetensors dtype (`.dtype`'s text).
pub fn safetensors_tf_name(st: &str) -> &'static str {
    match st {
        "F64" => "float64",
        "F32" => "float32",
        "F16" => "float16",
        "BF16" => "bfloat16",
        "I64" => "int64",
        "I32" => "int32",
        "I16" => "int16",
        "I8" => "int8",
        "U64" => "uint64",
        "U32" => "uint32",
        "U16" => "uint16",
        "U8" => "uint8",
        "BOOL" => "bool",
        "C64" => "complex64",
        "F8_E5M2" => "float8_e5m2",
        "F8_E4M3" => "float8_e4m3fn",
        "F8_E4M3FNUZ" => "float8_e4m3fnuz",
        "F8_E5M2FNUZ" => "float8_e5m2fnuz",
        other => panic!("no TensorFlow dtype for {other}"),
    }
}
