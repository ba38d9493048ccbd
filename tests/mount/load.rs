//! Parallel load on a real mount: 16 threads for a bounded time doing random-offset `pread`s of
//! random sizes on every file of a synthetic checkpoint (3 shards, partitioned and string
//! tensors), half of them through `O_DIRECT` descriptors so the reads reach the daemon instead of
//! the page cache, plus directory walks, every byte checked against what was written. The
//! daemon's RssAnon is printed before and after and must stay under 64 MiB.
//!
//! `TFMOUNT_LOAD_SECS` sets the duration (default 6 s).

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::synthetic::*;
use common::*;

/// Every file under `dir`, relative, with directories (ending in `/`).
fn walk(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let rel = e.path().strip_prefix(dir).expect("prefix").to_path_buf();
            let rel = rel.to_string_lossy().to_string();
            if e.file_type()?.is_dir() {
                stack.push(e.path());
                out.insert(format!("{rel}/"));
            } else {
                out.insert(rel);
            }
        }
    }
    Ok(out)
}

/// Reads `[off, off+len)` of a file into `buf`, by pread calls until EOF or `len`.
fn pread_all(f: &std::fs::File, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = f.read_at(&mut buf[got..], off + got as u64)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

#[test]
fn sixteen_readers_random_preads_and_walks() {
    let secs: u64 = std::env::var("TFMOUNT_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, model) = write_model(tmp.path(), 4096);
    let m = Mount::start(&prefix, &[]);
    let mnt = m.path();

    // Expected contents of every file; `.npy` = header + `.bin` (the header is checked here
    // once and then expected verbatim).
    let mut files: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for e in model.values() {
        files.push((bin_path(&mnt, &e.key, ".bin"), e.bin.clone()));
        files.push((
            bin_path(&mnt, &e.key, ".shape"),
            e.shape.clone().into_bytes(),
        ));
        files.push((
            bin_path(&mnt, &e.key, ".dtype"),
            e.dtype.clone().into_bytes(),
        ));
        if e.dtype != "string\n" {
            let p = bin_path(&mnt, &e.key, ".npy");
            let npy = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(npy.starts_with(b"\x93NUMPY\x01\x00") && npy.ends_with(&e.bin));
            assert_eq!((npy.len() - e.bin.len()) % 64, 0);
            files.push((p, npy));
        }
    }
    let listing = walk(&mnt).expect("walk");
    for (p, _) in &files {
        let rel = p
            .strip_prefix(&mnt)
            .expect("rel")
            .to_string_lossy()
            .to_string();
        assert!(listing.contains(&rel), "{rel} not listed");
    }
    let files = Arc::new(files);
    let listing = Arc::new(listing);
    let rss_before = rss_anon_kib(m.pid()).expect("RssAnon");

    let deadline = Instant::now() + Duration::from_secs(secs);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let walks = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let (files, listing, mnt) = (files.clone(), listing.clone(), mnt.clone());
            let (stop, reads, bytes, walks) =
                (stop.clone(), reads.clone(), bytes.clone(), walks.clone());
            std::thread::spawn(move || -> Result<(), String> {
                let mut rng = Rng::new(0x1234_5678 + t * 0x9e37_79b9);
                let direct = t % 2 == 0;
                let mut open = std::collections::HashMap::new();
                let mut buf = vec![0u8; 3 << 20];
                while Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
                    if rng.below(40) == 0 {
                        let got = walk(&mnt).map_err(|e| format!("walk: {e}"))?;
                        if got != *listing {
                            return Err("a directory walk differs from the first".into());
                        }
                        walks.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let i = rng.below(files.len() as u64) as usize;
                    let (path, want) = &files[i];
                    let f = match open.entry(i) {
                        std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                        std::collections::hash_map::Entry::Vacant(v) => {
                            let mut o = std::fs::OpenOptions::new();
                            o.read(true);
                            if direct {
                                o.custom_flags(libc::O_DIRECT);
                            }
                            v.insert(o.open(path).map_err(|e| format!("{}: {e}", path.display()))?)
                        }
                    };
                    let len = want.len() as u64;
                    let off = match rng.below(8) {
                        0 => 0,
                        1 => len.saturating_sub(rng.below(64)),
                        2 => len + rng.below(100),
                        _ => rng.below(len + 1),
                    };
                    let size = match rng.below(4) {
                        0 => 1 + rng.below(16),
                        1 => 1 + rng.below(4096),
                        2 => 1 + rng.below(256 << 10),
                        _ => 1 + rng.below(3 << 20),
                    } as usize;
                    let n = pread_all(f, &mut buf[..size], off).map_err(|e| {
                        format!("{}: pread {size} at {off}: {e}", path.display())
                    })?;
                    let a = off.min(len) as usize;
                    let b = (off + size as u64).min(len) as usize;
                    if buf[..n] != want[a..b] {
                        let first = buf[..n]
                            .iter()
                            .zip(&want[a..b])
                            .position(|(x, y)| x != y);
                        return Err(format!(
                            "{}: pread {size} at {off}: got {n} bytes, want {}; first difference at {first:?}",
                            path.display(),
                            b - a
                        ));
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                    bytes.fetch_add(n as u64, Ordering::Relaxed);
                    if rng.below(64) == 0 {
                        // Drop the file's cached pages, so buffered readers go to the daemon too.
                        use std::os::fd::AsRawFd;
                        unsafe {
                            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                        };
                    }
                }
                Ok(())
            })
        })
        .collect();
    let mut errors = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                stop.store(true, Ordering::Relaxed);
                errors.push(e);
            }
            Err(_) => errors.push("a reader panicked".into()),
        }
    }
    let rss_after = rss_anon_kib(m.pid()).expect("RssAnon after: the daemon is gone");
    let (reads, bytes, walks) = (
        reads.load(Ordering::Relaxed),
        bytes.load(Ordering::Relaxed),
        walks.load(Ordering::Relaxed),
    );
    eprintln!(
        "load: {secs} s, 16 threads: {reads} reads, {bytes} bytes checked ({:.1} MiB), {walks} directory walks; \
         daemon RssAnon before {rss_before} KiB, after {rss_after} KiB",
        bytes as f64 / (1 << 20) as f64
    );
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(
        reads > 100 && walks > 0,
        "too little was done to mean anything"
    );
    assert!(
        rss_after < 64 << 10,
        "daemon RssAnon {rss_after} KiB after the load (limit 64 MiB)"
    );
    let log = m.log_text();
    assert!(!log.contains("ERROR"), "errors in the daemon's log:\n{log}");
}
