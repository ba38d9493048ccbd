//! `-o direct_io` through real mounts: with `auto` and `always`, every way of reading a large
//! tensor (`cat`, `dd bs=1M`, `cp`, Python's `read()`, `mmap`, numpy's `mmap_mode`, safetensors'
//! `safe_open`) gives exactly the checkpoint's bytes, the same as with `never`; the files that are
//! not read with direct I/O keep the page cache; damaged tensors still fail with EIO; and the
//! READ requests are as large as the kernel allows.
//!
//! Which files bypass the page cache is checked without timing anything: after a file was read
//! whole, a fresh `mmap` of it shows (`mincore`) its pages resident when it is read through the
//! page cache, and none when it is read with direct I/O (nothing was cached, and mapping a
//! direct-I/O file drops what was).

use crate::common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{requires, sha256_hex, Mount};
use tfmount::parse::dtype::DType;
use tfmount::testkit::writer::{data_path, CheckpointWriter};

const U32: DType = DType(22);
/// Elements of the large tensor: 64 MiB and 4000 bytes, above `direct_io=auto`'s threshold and
/// not a whole number of pages.
const BIG_ELEMS: u64 = (tfmount::fuse::DIRECT_IO_MIN / 4) + 1000;
const SMALL_ELEMS: u64 = 3000;

/// The values of the test tensors, as numpy computes them too: `arange(n, dtype=uint32) * 2654435761 + seed`.
fn values(n: u64, seed: u32) -> Vec<u8> {
    (0..n as u32)
        .flat_map(|i| {
            i.wrapping_mul(2_654_435_761)
                .wrapping_add(seed)
                .to_le_bytes()
        })
        .collect()
}

struct Fixture {
    /// `big` (large), `small`, in one shard.
    good: PathBuf,
    /// `bigbad` (large) and `smallbad`, each with a byte flipped in its data, and `fine`.
    bad: PathBuf,
    big_sha: String,
    small: Vec<u8>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        // One directory, rewritten by each run of this test binary (one process at a time).
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("direct_io");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let good = dir.join("good/ckpt");
        let big = values(BIG_ELEMS, 0);
        let small = values(SMALL_ELEMS, 7);
        let mut w = CheckpointWriter::new(&good, 1).expect("writer");
        w.add(b"big", U32, &[BIG_ELEMS], &big, 0).expect("big");
        w.add(b"small", U32, &[SMALL_ELEMS], &small, 0)
            .expect("small");
        w.finish().expect("finish");
        let bad = dir.join("bad/ckpt");
        let mut w = CheckpointWriter::new(&bad, 1).expect("writer");
        w.add(b"bigbad", U32, &[BIG_ELEMS], &big, 0)
            .expect("bigbad");
        w.add(b"smallbad", U32, &[SMALL_ELEMS], &small, 0)
            .expect("smallbad");
        w.add(b"fine", U32, &[SMALL_ELEMS], &small, 0)
            .expect("fine");
        w.finish().expect("finish");
        // One byte flipped inside each damaged tensor: its CRC-32C no longer matches.
        let shard = data_path(&bad, 0, 1);
        let mut data = std::fs::read(&shard).expect("shard");
        data[100] ^= 0x40;
        data[big.len() + 10] ^= 0x01;
        std::fs::write(&shard, data).expect("damage");
        Fixture {
            good,
            bad,
            big_sha: sha256_hex(&big),
            small,
        }
    })
}

fn output(cmd: &mut Command) -> Vec<u8> {
    let o = cmd.output().expect("run");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

/// The page-cache residency of a fresh shared mapping of `path`: (resident pages, pages).
fn resident_pages(path: &Path) -> (usize, usize) {
    let f = std::fs::File::open(path).expect("open");
    let len = f.metadata().expect("stat").len() as usize;
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let pages = len.div_ceil(page);
    // SAFETY: a read-only shared mapping of an open file, unmapped below; nothing is touched.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        let mut vec = vec![0u8; pages];
        let r = libc::mincore(p, len, vec.as_mut_ptr());
        let err = std::io::Error::last_os_error();
        libc::munmap(p, len);
        assert_eq!(r, 0, "mincore: {err}");
        (vec.iter().filter(|b| *b & 1 == 1).count(), pages)
    }
}

/// SHA-256 of a shared mapping of `path`, read through the mapping.
fn mmap_sha(path: &Path) -> String {
    let f = std::fs::File::open(path).expect("open");
    let len = f.metadata().expect("stat").len() as usize;
    // SAFETY: as in `resident_pages`; the slice lives while the mapping does.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
        let sha = sha256_hex(std::slice::from_raw_parts(p as *const u8, len));
        libc::munmap(p, len);
        sha
    }
}

fn mount(src: &Path, mode: &str) -> Mount {
    Mount::start(src, &["-o", &format!("direct_io={mode}")])
}

/// `cat`, `dd bs=1M`, `cp`, Python's `read()` and `mmap` of the large `.bin` give the
/// checkpoint's bytes in every mode, and so do its `.npy` and the small files; `st_blksize`
/// says which files are read with direct I/O.
#[test]
fn every_reader_gets_the_checkpoint_bytes() {
    let f = fixture();
    let py = requires::python("numpy", "");
    let reference = mount(&f.good, "never");
    let ref_vars = reference.path().join("variables");
    let want = values(BIG_ELEMS, 0);
    let ref_npy = sha256_hex(&std::fs::read(ref_vars.join("big.npy")).expect("never: big.npy"));
    for mode in ["never", "auto", "always"] {
        let m = mount(&f.good, mode);
        let vars = m.path().join("variables");
        let big = vars.join("big.bin");
        let what = |how: &str| format!("direct_io={mode}: {how} of big.bin");
        assert_eq!(
            sha256_hex(&output(Command::new("cat").arg(&big))),
            f.big_sha,
            "{}",
            what("cat")
        );
        assert_eq!(
            sha256_hex(&output(
                Command::new("dd")
                    .arg(format!("if={}", big.display()))
                    .args(["bs=1M", "status=none"])
            )),
            f.big_sha,
            "{}",
            what("dd bs=1M")
        );
        let copy = m.dir.path().join("copy.bin");
        output(Command::new("cp").arg(&big).arg(&copy));
        assert_eq!(
            sha256_hex(&std::fs::read(&copy).expect("copy")),
            f.big_sha,
            "{}",
            what("cp")
        );
        std::fs::remove_file(&copy).expect("rm copy");
        assert_eq!(mmap_sha(&big), f.big_sha, "{}", what("mmap"));
        // Reads at odd offsets and sizes, across the end of the file.
        {
            use std::os::unix::fs::FileExt;
            let file = std::fs::File::open(&big).expect("open");
            let len = BIG_ELEMS as usize * 4;
            let mut buf = vec![0u8; 3 << 20];
            for (off, n) in [
                (1usize, 4095usize),
                (4097, 1 << 20),
                (len - 5000, 3 << 20),
                (len, 10),
            ] {
                let got = file.read_at(&mut buf[..n], off as u64).expect("pread");
                assert_eq!(
                    got,
                    n.min(len.saturating_sub(off)),
                    "{}",
                    what(&format!("pread {n} at {off}"))
                );
                assert_eq!(
                    &buf[..got],
                    &want[off..off + got],
                    "{}",
                    what(&format!("pread {n} at {off}"))
                );
            }
        }
        if let Some(py) = &py {
            let out = output(Command::new(py).arg("-c").arg(
                "import hashlib, sys\nwith open(sys.argv[1], 'rb') as f: print(hashlib.sha256(f.read()).hexdigest())",
            ).arg(&big));
            assert_eq!(
                String::from_utf8_lossy(&out).trim(),
                f.big_sha,
                "{}",
                what("Python read()")
            );
        }
        assert_eq!(
            sha256_hex(&std::fs::read(vars.join("big.npy")).expect("big.npy")),
            ref_npy,
            "direct_io={mode}: big.npy"
        );
        assert_eq!(
            std::fs::read(vars.join("small.bin")).expect("small.bin"),
            f.small,
            "direct_io={mode}: small.bin"
        );
        for side in ["big.shape", "big.dtype", "small.shape", "small.npy"] {
            assert_eq!(
                std::fs::read(vars.join(side)).expect(side),
                std::fs::read(ref_vars.join(side)).expect(side),
                "direct_io={mode}: {side}"
            );
        }
        // A direct-I/O file announces a block size of one full READ, so that `cat`, `cp` and
        // Python read that much per call; the others keep 4096.
        let blksize = |name: &str| std::fs::metadata(vars.join(name)).expect(name).blksize();
        let full = u64::from(tfmount::fuse::DIRECT_IO_BLKSIZE);
        let (big_bs, small_bs) = match mode {
            "never" => (4096, 4096),
            "auto" => (full, 4096),
            _ => (full, full),
        };
        assert_eq!(blksize("big.bin"), big_bs, "direct_io={mode}: big.bin");
        assert_eq!(blksize("big.npy"), big_bs, "direct_io={mode}: big.npy");
        assert_eq!(
            blksize("small.bin"),
            small_bs,
            "direct_io={mode}: small.bin"
        );
        assert_eq!(blksize("big.shape"), 4096, "direct_io={mode}: big.shape");
    }
}

/// Which files bypass the page cache: after reading a file whole, a fresh mapping of it has
/// its pages resident when it went through the page cache, none when it was read with direct
/// I/O.
#[test]
fn direct_io_files_leave_nothing_in_the_page_cache() {
    let f = fixture();
    for mode in ["never", "auto", "always"] {
        let m = mount(&f.good, mode);
        let vars = m.path().join("variables");
        let root = m.path();
        for (file, direct) in [
            (vars.join("big.bin"), mode != "never"),
            (vars.join("big.npy"), mode != "never"),
            (vars.join("small.bin"), mode == "always"),
            (vars.join("small.shape"), false),
            (root.join("model.safetensors"), mode == "always"),
            (root.join("tensors.tsv"), false),
        ] {
            let bytes = std::fs::read(&file).expect("read");
            assert!(!bytes.is_empty(), "{}", file.display());
            let (resident, pages) = resident_pages(&file);
            if direct {
                assert_eq!(
                    resident,
                    0,
                    "direct_io={mode}: {} has {resident} of {pages} pages cached",
                    file.display()
                );
            } else {
                assert!(
                    resident > 0,
                    "direct_io={mode}: {} has none of its {pages} pages cached",
                    file.display()
                );
            }
        }
    }
}

/// numpy's `mmap_mode="r"` and safetensors' `safe_open` (both map the file shared) see the
/// right values in a direct-I/O file.
#[test]
fn numpy_and_safetensors_map_direct_io_files() {
    let f = fixture();
    let Some(py) = requires::python("numpy, safetensors", "") else {
        return;
    };
    let script = r#"
import sys
import numpy as np
from safetensors import safe_open
root, n, small_n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def values(n, seed):
    return np.arange(n, dtype=np.uint32) * np.uint32(2654435761) + np.uint32(seed)
big = values(n, 0)
small = values(small_n, 7)
m = np.load(root + "/variables/big.npy", mmap_mode="r")
assert isinstance(m, np.memmap), type(m)
assert m.dtype == np.uint32 and m.shape == (n,), (m.dtype, m.shape)
assert np.array_equal(m, big), "big.npy mapped"
assert np.array_equal(np.load(root + "/variables/big.npy"), big), "big.npy read"
with safe_open(root + "/model.safetensors", framework="numpy") as st:
    assert sorted(st.keys()) == ["big", "small"], st.keys()
    assert np.array_equal(st.get_tensor("big"), big), "model.safetensors big"
    assert np.array_equal(st.get_tensor("small"), small), "model.safetensors small"
    assert np.array_equal(st.get_slice("big")[n - 5:], big[n - 5:]), "slice"
raw = np.memmap(root + "/variables/big.bin", dtype="<u4", mode="r")
assert np.array_equal(raw, big), "big.bin memmap"
print("ok")
"#;
    for mode in ["auto", "always"] {
        let m = mount(&f.good, mode);
        let out = Command::new(&py)
            .arg("-c")
            .arg(script)
            .arg(m.path())
            .arg(BIG_ELEMS.to_string())
            .arg(SMALL_ELEMS.to_string())
            .output()
            .expect("python");
        assert!(
            out.status.success() && out.stdout.starts_with(b"ok"),
            "direct_io={mode}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A damaged tensor fails with EIO in every mode, large (direct I/O under `auto`) or small,
/// and `cat` of it fails; the intact tensor beside it reads.
#[test]
fn damaged_tensors_still_fail_with_eio() {
    let f = fixture();
    for mode in ["never", "auto", "always"] {
        let m = mount(&f.bad, mode);
        let vars = m.path().join("variables");
        for name in ["bigbad.bin", "bigbad.npy", "smallbad.bin", "smallbad.npy"] {
            let e = std::fs::read(vars.join(name)).expect_err(name);
            assert_eq!(
                e.raw_os_error(),
                Some(libc::EIO),
                "direct_io={mode}: {name}: {e}"
            );
            // Again: the outcome of the check is remembered, not forgotten.
            let e = std::fs::read(vars.join(name)).expect_err(name);
            assert_eq!(
                e.raw_os_error(),
                Some(libc::EIO),
                "direct_io={mode}: {name} again: {e}"
            );
        }
        let st = Command::new("cat")
            .arg(vars.join("bigbad.bin"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("cat");
        assert!(
            !st.success(),
            "direct_io={mode}: cat of a damaged tensor succeeded"
        );
        assert_eq!(
            std::fs::read(vars.join("fine.bin")).expect("fine"),
            f.small,
            "direct_io={mode}"
        );
        assert_eq!(
            std::fs::read_to_string(vars.join("bigbad.shape")).expect("shape"),
            format!("{BIG_ELEMS}\n")
        );
    }
}

/// Direct-I/O READ requests are as large as the kernel allows: `max_pages` pages, which fuser
/// asks as large as it can take and the kernel caps at `fs.fuse.max_pages_limit` (256 pages
/// on kernels without that knob, the older fixed limit). The daemon logs the largest at unmount.
#[test]
fn direct_io_reads_use_the_largest_request() {
    let f = fixture();
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let limit: u64 = std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(256);
    // fuser asks for max(max_write = 16 MiB, readahead) worth of pages.
    let want = limit.min((16 << 20) / page) * page;
    let mut m = mount(&f.good, "always");
    let big = m.path().join("variables/big.bin");
    let bs = format!("bs={}", 4 * want);
    output(
        Command::new("dd")
            .arg(format!("if={}", big.display()))
            .args([bs.as_str(), "status=none", "of=/dev/null"]),
    );
    m.unmount();
    let log = m.log_text();
    assert!(
        log.contains(&format!("largest READ request: {want} bytes")),
        "expected READs of {want} bytes; log:\n{log}"
    );
}
