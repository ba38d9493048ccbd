//! TFLite models damaged thousands of ways, opened through the filesystem core (`probe` + `Fs`,
//! no kernel): every truncation of the first 2 KB and then at a stride, and seeded single-bit
//! flips anywhere (flatbuffer tables, vtables, offsets, buffer payloads, the appended zip) of
//! every fixture of `tests/fixtures/tflite/`.
//!
//! For every input:
//! - nothing panics (each input runs under `catch_unwind`; the failure names every input that
//!   panicked);
//! - no single allocation exceeds [`MAX_ALLOCATION`] (the files are at most 20 KB);
//! - every `.bin` that reads is the file's own bytes where the verified model says they are:
//!   the damaged file's bytes at the tensor's `user.tfmount.offset`, of the tensor's size (the
//!   flatbuffer verified, a flip may point a tensor at other bytes of the file: those are what it
//!   holds then); and a truncated file serves each tensor exactly as the whole file does, or
//!   fails (cutting bytes off never changes any that are left);
//! - every other file (`dequantized/`, `graph/`, `model.txt`, `metadata/`, the views) reads
//!   without a panic, to its end or to an error.

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use crate::common::tracking_alloc::largest_allocation;
use common::hostile::{damages, each_file, key_of, open, read_to_size_in, scratch, Damage, Sweep};
use common::tflite_dir as dir;
use tfmount::fs::Kind;

/// The largest single allocation one input may cause.
const MAX_ALLOCATION: usize = 16 << 20;
/// Every truncation up to this length, then one every [`CUT_STRIDE`] bytes.
const CUT_ALL: usize = 2048;
const CUT_STRIDE: usize = 97;
/// Single-bit flips per file, at seeded places.
const FLIPS: usize = 1200;

/// A `.bin` read: its bytes and its `user.tfmount.offset`, or the error.
type BinRead = Result<(Vec<u8>, Option<u64>), String>;

/// What one input served: `.bin`s by key (bytes and the offset xattr, or the error), and how
/// many other files were read to their end.
#[derive(Default)]
struct Served {
    opened: bool,
    bins: Vec<(String, BinRead)>,
    others: usize,
}

/// Opens `path` as a mount would and reads every file of the tree.
fn serve(path: &Path) -> Served {
    let mut s = Served::default();
    let Ok(fs) = open(path) else {
        return s;
    };
    s.opened = true;
    each_file(&fs, tfmount::fs::ROOT, "", |_, e, p| {
        if e.kind != Kind::File {
            return;
        }
        let in_vars = p.starts_with("/variables/") || p.contains("/variables/");
        if in_vars && e.name.ends_with(b".bin") {
            let key = key_of(&fs, e.ino, || p.to_string());
            let offset = fs
                .getxattr(e.ino, b"user.tfmount.offset")
                .ok()
                .and_then(|o| String::from_utf8_lossy(&o).trim().parse().ok());
            let at = p.rsplit_once('/').map_or("", |(at, _)| at);
            s.bins.push((
                format!("{at}:{key}"),
                read_to_size_in(&fs, e.ino, 1 << 16).map(|b| (b, offset)),
            ));
        } else {
            let _ = read_to_size_in(&fs, e.ino, 1 << 16);
            let _ = fs.listxattr(e.ino);
            s.others += 1;
        }
    });
    s
}

/// What one fixture's damaged inputs gave: the harness's counts, and the `.bin`s read and
/// refused.
#[derive(Default)]
struct Tally {
    sweep: Sweep,
    bins_ok: usize,
    bins_err: usize,
}

/// Serves each of `damages` of fixture `name` (written to `p` in turn) and checks it.
fn sweep(name: &str, orig: &[u8], damages: Vec<Damage>, p: &Path) -> Tally {
    let mut t = Tally {
        sweep: Sweep::new(MAX_ALLOCATION),
        ..Tally::default()
    };
    let whole = serve(&dir().join(name));
    assert!(whole.opened, "{name} opens");
    let original: HashMap<String, Vec<u8>> = whole
        .bins
        .iter()
        .map(|(k, r)| (k.clone(), r.as_ref().expect("undamaged reads").0.clone()))
        .collect();
    for d in damages {
        let bytes = d.apply(orig);
        std::fs::write(p, &bytes).expect("write");
        let Some(served) = t.sweep.input(&format!("{name} {d:?}"), || serve(p)) else {
            continue;
        };
        t.sweep.opened += usize::from(served.opened);
        for (key, r) in served.bins {
            let Ok((b, offset)) = r else {
                t.bins_err += 1;
                continue;
            };
            t.bins_ok += 1;
            let ok = match d {
                Damage::Cut(_) => original.get(&key) == Some(&b),
                Damage::Flip(..) => {
                    offset.is_some_and(|o| {
                        let o = o as usize;
                        bytes.get(o..o + b.len()) == Some(&b[..])
                    }) || key.contains("string")
                }
            };
            if !ok {
                t.sweep
                    .wrong
                    .push(format!("{name} {d:?}: {key}: wrong bytes served"));
            }
        }
    }
    t
}

/// The fixtures' damaged inputs are made in one seeded sequence, then served by one worker
/// per CPU (each input is independent; the allocation tracking is per thread).
#[test]
fn damaged_models_never_panic_nor_serve_wrong_bytes() {
    let tmp = scratch();
    let mut rng = common::Rng::new(0x7f1_17e);
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .expect("fixtures")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".tflite"))
        .collect();
    names.sort();
    assert!(names.len() >= 7, "{names:?}");
    let mut jobs: Vec<(String, Vec<u8>, Vec<Damage>)> = Vec::new();
    for name in &names {
        let orig = std::fs::read(dir().join(name)).expect("read");
        let damages = damages(orig.len(), CUT_ALL, CUT_STRIDE, FLIPS, &mut rng);
        jobs.push((name.clone(), orig, damages));
    }
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(jobs.len());
    let jobs = std::sync::Mutex::new(jobs);
    let tallies: Vec<Tally> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                sc.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let job = jobs.lock().unwrap_or_else(|p| p.into_inner()).pop();
                        let Some((name, orig, damages)) = job else {
                            return done;
                        };
                        done.push(sweep(&name, &orig, damages, &tmp.path().join(&name)));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect()
    });
    let mut all = Tally::default();
    for t in tallies {
        all.sweep.merge(t.sweep);
        all.bins_ok += t.bins_ok;
        all.bins_err += t.bins_err;
    }
    let Tally {
        sweep,
        bins_ok,
        bins_err,
    } = all;
    let (inputs, opened) = (sweep.inputs, sweep.opened);
    eprintln!("{inputs} damaged inputs, {opened} opened, {bins_ok} .bin read, {bins_err} refused");
    let failures = sweep.failures(usize::MAX);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The damage was seen: some inputs opened, some tensors were refused.
    assert!(opened > 0 && bins_err > 0 && bins_ok > 0);
}

#[test]
fn a_tensor_claiming_a_huge_shape_fails_without_allocating_it() {
    // float.tflite's MatMul is [16, 256] float32; claim [16, 2^30] instead: its buffer is too
    // small for its shape, so reading it fails, and no allocation of the claimed size happens.
    let orig = std::fs::read(dir().join("float.tflite")).expect("read");
    let needle: Vec<u8> = [2u32, 16, 256]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let at = orig
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the shape vector of MatMul");
    let mut b = orig.clone();
    b[at + 8..at + 12].copy_from_slice(&(1u32 << 30).to_le_bytes());
    let tmp = tempfile::tempdir().expect("tmp");
    let p = tmp.path().join("huge.tflite");
    std::fs::write(&p, &b).expect("write");
    let mut served = None;
    let big = largest_allocation(|| served = Some(serve(&p)));
    let s = served.expect("served");
    assert!(s.opened);
    assert!(big < MAX_ALLOCATION, "{big}");
    let (_, r) = s
        .bins
        .iter()
        .find(|(k, _)| k.ends_with(":MatMul"))
        .expect("MatMul listed");
    let e = r.as_ref().expect_err("a shape its buffer cannot hold");
    assert!(!e.is_empty());
}
