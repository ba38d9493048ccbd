//! `tfmount warm SOURCE [KEY...]`: `verify`'s parallel read of every (chosen) tensor, with the
//! disk cache on, so that every byte read lands in it checked; exit 0 only when every byte was
//! read, checked and kept.

use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cli::WarmArgs;
use crate::model::lines::{closed, Lines};
use crate::model::verify;
use crate::source::remote::disk::TOTAL;
use crate::source::remote::stats::FETCHED;

/// Tensors fetched at once by default (object storage answers many requests at once).
const THREADS: usize = 8;
/// How long the end waits for the cache's writer thread.
const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) fn run(args: &WarmArgs) -> i32 {
    let start = Instant::now();
    let settings = match crate::options::settings(&args.options) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tfmount warm: {e}");
            return 2;
        }
    };
    let Some(dir) = settings.remote.cache_dir.clone() else {
        eprintln!(
            "tfmount warm: no disk cache to fill (cache_dir=none, or {}=none): give -o cache_dir=DIR",
            crate::source::remote::config::CACHE_DIR_ENV
        );
        return 2;
    };
    // A mount reads without a cache it cannot use; warm has nothing to do without one.
    if let Err(e) = crate::source::remote::disk::DiskCache::usable(&dir) {
        eprintln!("tfmount warm: cache_dir: {e}");
        return 2;
    }
    if !crate::source::remote::url::is_remote(&args.source.to_string_lossy()) {
        eprintln!(
            "tfmount warm: {}: a local path; only object storage (s3://, gs://, http(s)://) is cached",
            args.source.display()
        );
        return 2;
    }
    // KEYs given: only what they name is fetched (whole pieces of the cache, and the index),
    // not the object read-ahead's window past them.
    let mut remote = settings.remote;
    remote.object_read_ahead = args.keys.is_empty();
    crate::model::open::use_remote_config(remote);
    let threads = args.threads.map_or_else(
        || {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .max(THREADS)
        },
        usize::from,
    );
    let only: Vec<Vec<u8>> = args.keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    let mut v = match verify::verify(&args.source, Some(threads), Lines::new(), true, &only) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tfmount warm: {e}");
            return 3;
        }
    };
    // Every piece read is written before anything is counted: the pieces still queued for the
    // cache's writer thread when the read ended (its store dropped) are written now, and their
    // write failures and evictions are seen.
    let flushed = crate::source::remote::disk::flush_all(FLUSH_LIMIT);
    let lost = TOTAL.write_failures.load(Ordering::Relaxed) + TOTAL.evicted.load(Ordering::Relaxed);
    if !flushed {
        v.problem(
            "",
            b"[cache]",
            &format!(
                "pieces read were still being written after {FLUSH_LIMIT:?} (see the warning \
                 above): not all kept"
            ),
        );
    }
    if lost > 0 {
        v.problem(
            "",
            b"[cache]",
            &format!(
                "{lost} pieces read could not be kept (written {} bytes; cache_max too small for \
                 what was asked, or the disk full: see the warning above)",
                TOTAL.write_bytes.load(Ordering::Relaxed)
            ),
        );
    }
    if let Err(e) = v.out.flush() {
        if !closed(&e) {
            eprintln!("tfmount warm: stdout: {e}");
        }
    }
    v.progress.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let bytes = v.bytes.load(Ordering::Relaxed);
    // What the server sent this run (the index and metadata included), and the bytes of the
    // pieces that were in the cache before it (each counted once).
    let fetched = FETCHED.load(Ordering::Relaxed);
    let cached = TOTAL.found_bytes.load(Ordering::Relaxed);
    eprintln!(
        "warm: {} tensors, {bytes} bytes checked ({fetched} bytes fetched, {cached} bytes \
         already in the cache), {} problem{}, {secs:.3} s, {:.1} MB/s",
        v.tensors,
        v.problems,
        if v.problems == 1 { "" } else { "s" },
        if secs > 0.0 {
            bytes as f64 / secs / 1e6
        } else {
            0.0
        }
    );
    i32::from(v.problems > 0)
}
