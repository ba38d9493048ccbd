//! The stable-toolchain fuzz harness: the same entry points as the `cargo fuzz` targets
//! (`src/testkit/fuzz/`), driven by random mutation of the fixture seeds instead of libFuzzer's
//! coverage feedback. Used by the CI smoke run (`scripts/fuzz-smoke.sh`), and by `fuzz/seed.sh`
//! to write the seed corpora.
//!
//! ```text
//! cargo run --example fuzz -- seeds OUT_DIR               write OUT_DIR/<target>/<seed>
//! cargo run --example fuzz -- run [--secs N] [--seed S] [--max-len L] [--jobs J] [TARGET...]
//!                                                         mutate for N seconds per target,
//!                                                         J targets at a time (default: one
//!                                                         per core)
//! cargo run --example fuzz -- replay TARGET FILE...       run inputs once (crash reproduction)
//! ```
//!
//! `run` stops a target at its first failure and saves the input as
//! `fuzz/artifacts/stable/<target>-crash-<hash>`; it exits 1 if any target failed. An input
//! that aborts the process (a single allocation over `--max-alloc-mb`, 256 by default, a stack
//! overflow) is left in the `…-current` file named at the start of each target. An input that
//! runs longer than `--timeout` seconds (10) is saved as `<target>-timeout-<hash>` and ends the
//! run.

use tfmount::testkit::fuzz as targets;
use tfmount::testkit::rng::Rng;

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Refuses single allocations larger than a limit, as libFuzzer's `-malloc_limit_mb` does: an
/// input-derived allocation size shows up as an abort with the input left on disk.
struct Capped;

static ALLOC_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > ALLOC_LIMIT.load(Ordering::Relaxed) {
            const MSG: &[u8] = b"fuzz harness: single allocation over --max-alloc-mb\n";
            // SAFETY: writing a static buffer to stderr; nothing is allocated here.
            unsafe { libc::write(2, MSG.as_ptr().cast(), MSG.len()) };
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > ALLOC_LIMIT.load(Ordering::Relaxed) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Capped = Capped;

const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    4,
    7,
    8,
    0x7f,
    0x80,
    0xff,
    0x100,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    0x1_0000_0000,
    i64::MAX as u64,
    u64::MAX,
];

/// One random edit of `buf` (splicing from `other`).
fn mutate_once(rng: &mut Rng, buf: &mut Vec<u8>, other: &[u8], max_len: usize) {
    let len = buf.len();
    match rng.index(12) {
        0 if len > 0 => {
            let i = rng.index(len);
            buf[i] ^= 1 << rng.index(8);
        }
        1 if len > 0 => {
            let i = rng.index(len);
            buf[i] = rng.next() as u8;
        }
        2 if len > 0 => {
            let i = rng.index(len);
            buf[i] = [0u8, 1, 0x7f, 0x80, 0xff, b'/', b'%', b'.'][rng.index(8)];
        }
        3 => {
            let i = rng.index(len + 1);
            let n = 1 + rng.index(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
            buf.splice(i..i, bytes);
        }
        4 if len > 0 => {
            let i = rng.index(len);
            let n = 1 + rng.index((len - i).min(64));
            buf.drain(i..i + n);
        }
        5 if len > 0 => {
            // Duplicate a range somewhere.
            let i = rng.index(len);
            let n = 1 + rng.index((len - i).min(256));
            let piece = buf[i..i + n].to_vec();
            let at = rng.index(len + 1);
            buf.splice(at..at, piece);
        }
        6 if len > 0 => {
            // Overwrite with a copy of another range.
            let (a, b) = (rng.index(len), rng.index(len));
            let n = 1 + rng.index((len - a.max(b)).min(64));
            let piece = buf[a..a + n].to_vec();
            buf[b..b + n].copy_from_slice(&piece);
        }
        7 if len >= 4 => {
            let i = rng.index(len - 3);
            let v = INTERESTING[rng.index(INTERESTING.len())] as u32;
            buf[i..i + 4].copy_from_slice(&v.to_le_bytes());
        }
        8 if len >= 8 => {
            let i = rng.index(len - 7);
            let v = INTERESTING[rng.index(INTERESTING.len())];
            buf[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        9 if len > 0 => {
            // Replace the varint at a random place with an interesting one.
            let i = rng.index(len);
            let mut end = i;
            while end < len && end - i < 10 && buf[end] & 0x80 != 0 {
                end += 1;
            }
            let end = (end + 1).min(len);
            let mut v = Vec::new();
            let x = INTERESTING[rng.index(INTERESTING.len())];
            tfmount::parse::varint::encode_u64(x.wrapping_add(rng.index(3) as u64), &mut v);
            buf.splice(i..end, v);
        }
        10 if !other.is_empty() => {
            // Splice: a piece of another seed.
            let a = rng.index(other.len());
            let n = 1 + rng.index((other.len() - a).min(512));
            let at = rng.index(len + 1);
            if rng.index(2) == 0 {
                buf.splice(at..at, other[a..a + n].iter().copied());
            } else {
                let end = (at + n).min(len);
                buf.splice(at..end, other[a..a + n].iter().copied());
            }
        }
        11 if len > 1 => {
            buf.truncate(rng.index(len));
        }
        _ => buf.push(rng.next() as u8),
    }
    buf.truncate(max_len);
}

fn fnv(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn short_hash(b: &[u8]) -> String {
    format!("{:016x}", fnv(b))
}

struct RunOpts {
    secs: f64,
    seed: u64,
    max_len: usize,
    timeout: f64,
    artifacts: PathBuf,
}

/// What one target's run did.
struct Outcome {
    execs: u64,
    failure: Option<PathBuf>,
}

fn fuzz_one(
    name: &str,
    target: targets::Target,
    seeds: &[Vec<u8>],
    opts: &RunOpts,
) -> std::io::Result<Outcome> {
    std::fs::create_dir_all(&opts.artifacts)?;
    // Each input is written here before it runs, so one that aborts the process survives it:
    // in tmpfs where there is one (a write per run to a disk-backed tree costs milliseconds).
    let shm = Path::new("/dev/shm");
    let current = if shm.is_dir() {
        shm.join(format!(
            "tfmount-fuzz-{}-{name}-current",
            std::process::id()
        ))
    } else {
        opts.artifacts.join(format!("{name}-current"))
    };
    // Mutations never cut a seed shorter than it is (Keras files are larger than the default).
    let max_len = seeds.iter().map(Vec::len).fold(opts.max_len, usize::max);
    // Each target's own stream, reproducible from `--seed`.
    let mut rng = Rng::new(opts.seed ^ fnv(name.as_bytes()));
    // A watchdog: an input running past the timeout is saved and ends the process.
    let started = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let clock = Instant::now();
    {
        let (started, done) = (started.clone(), done.clone());
        let (current, artifacts, timeout) = (current.clone(), opts.artifacts.clone(), opts.timeout);
        let name = name.to_string();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let s = started.load(Ordering::Relaxed);
                if s != 0 && clock.elapsed().as_secs_f64() - (s as f64 / 1e6) > timeout {
                    let input = std::fs::read(&current).unwrap_or_default();
                    let out = artifacts.join(format!("{name}-timeout-{}", short_hash(&input)));
                    let _ = std::fs::write(&out, &input);
                    eprintln!(
                        "{name}: an input ran longer than {timeout} s; saved as {}",
                        out.display()
                    );
                    std::process::exit(1);
                }
            }
        });
    }
    println!(
        "{name}: an input that aborts the process is left in {}",
        current.display()
    );
    let deadline = Instant::now() + Duration::from_secs_f64(opts.secs);
    let mut execs = 0u64;
    let mut failure = None;
    // Every seed once, unmutated, then mutations of random seeds.
    let mut queue: Vec<Vec<u8>> = seeds.to_vec();
    while failure.is_none() && (!queue.is_empty() || Instant::now() < deadline) {
        let input = match queue.pop() {
            Some(s) => s,
            None if seeds.is_empty() => Vec::new(),
            None => {
                let mut b = seeds[rng.index(seeds.len())].clone();
                let other = &seeds[rng.index(seeds.len())];
                for _ in 0..1 + rng.index(8) {
                    mutate_once(&mut rng, &mut b, other, max_len);
                }
                b
            }
        };
        std::fs::write(&current, &input)?;
        started.store(clock.elapsed().as_micros().max(1) as u64, Ordering::Relaxed);
        let r = catch_unwind(AssertUnwindSafe(|| target(&input)));
        started.store(0, Ordering::Relaxed);
        execs += 1;
        if r.is_err() {
            let out = opts
                .artifacts
                .join(format!("{name}-crash-{}", short_hash(&input)));
            std::fs::write(&out, &input)?;
            failure = Some(out);
        }
    }
    done.store(true, Ordering::Relaxed);
    let _ = std::fs::remove_file(&current);
    Ok(Outcome { execs, failure })
}

fn usage() -> ! {
    eprintln!(
        "usage: fuzz seeds OUT_DIR\n       \
         fuzz run [--secs N] [--seed S] [--max-len L] [--timeout T] [--max-alloc-mb M] [--jobs J] [TARGET...]\n       \
         fuzz replay TARGET FILE...\ntargets: {}",
        targets::TARGETS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(" ")
    );
    std::process::exit(2)
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else { usage() };
    let seeds = targets::seeds(&fixtures())?;
    match cmd.as_str() {
        "seeds" => {
            let Some(out) = args.get(1) else { usage() };
            for (t, name, bytes) in &seeds {
                let d = Path::new(out).join(t);
                std::fs::create_dir_all(&d)?;
                std::fs::write(d.join(name), bytes)?;
            }
            println!("wrote {} seeds under {out}", seeds.len());
            Ok(())
        }
        "replay" => {
            let Some(t) = args.get(1).and_then(|n| targets::target(n)) else {
                usage()
            };
            for f in &args[2..] {
                let input = std::fs::read(f)?;
                t(&input);
                println!("{f}: ok");
            }
            Ok(())
        }
        "run" => {
            let mut opts = RunOpts {
                secs: 10.0,
                seed: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1,
                max_len: 1 << 16,
                timeout: 10.0,
                artifacts: Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/artifacts/stable"),
            };
            let mut max_alloc_mb = 256usize;
            let mut jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
            let mut names = Vec::new();
            let mut it = args[1..].iter();
            while let Some(a) = it.next() {
                let mut val = || it.next().cloned().unwrap_or_else(|| usage());
                match a.as_str() {
                    "--secs" => opts.secs = val().parse().unwrap_or_else(|_| usage()),
                    "--seed" => opts.seed = val().parse().unwrap_or_else(|_| usage()),
                    "--max-len" => opts.max_len = val().parse().unwrap_or_else(|_| usage()),
                    "--timeout" => opts.timeout = val().parse().unwrap_or_else(|_| usage()),
                    "--max-alloc-mb" => max_alloc_mb = val().parse().unwrap_or_else(|_| usage()),
                    "--jobs" => jobs = val().parse().unwrap_or_else(|_| usage()),
                    n if targets::target(n).is_some() => names.push(n.to_string()),
                    _ => usage(),
                }
            }
            if names.is_empty() {
                names = targets::TARGETS
                    .iter()
                    .map(|(n, _)| n.to_string())
                    .collect();
            }
            println!("seed {} ({} s per target)", opts.seed, opts.secs);
            // Keep panics of caught failures to one line each.
            std::panic::set_hook(Box::new(|info| eprintln!("panic: {info}")));
            ALLOC_LIMIT.store(max_alloc_mb << 20, Ordering::Relaxed);
            // The targets `jobs` at a time, each on its own thread for its `--secs` (each its
            // own mutation stream, so the outcome does not depend on the order they ran in).
            let queue = std::sync::Mutex::new(names.iter());
            let failed = AtomicU64::new(0);
            let run_one = |name: &str| -> std::io::Result<()> {
                let Some(t) = targets::target(name) else {
                    usage()
                };
                let own: Vec<Vec<u8>> = seeds
                    .iter()
                    .filter(|(tn, ..)| *tn == name)
                    .map(|(.., b)| b.clone())
                    .collect();
                let o = fuzz_one(name, t, &own, &opts)?;
                match &o.failure {
                    None => println!("{name}: {} execs, no failure", o.execs),
                    Some(p) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        println!(
                            "{name}: {} execs, FAILED: input saved as {}",
                            o.execs,
                            p.display()
                        );
                    }
                }
                Ok(())
            };
            std::thread::scope(|s| -> std::io::Result<()> {
                let workers: Vec<_> = (0..jobs.max(1))
                    .map(|_| {
                        s.spawn(|| -> std::io::Result<()> {
                            loop {
                                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                                match next {
                                    Some(name) => run_one(name)?,
                                    None => return Ok(()),
                                }
                            }
                        })
                    })
                    .collect();
                for w in workers {
                    w.join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("a worker panicked")))?;
                }
                Ok(())
            })?;
            let failed = failed.into_inner();
            ALLOC_LIMIT.store(usize::MAX, Ordering::Relaxed);
            if failed > 0 {
                std::process::exit(1);
            }
            Ok(())
        }
        _ => usage(),
    }
}
