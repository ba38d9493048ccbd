//! Source files changing underneath a real mount, while it is being read. Two outcomes only:
//! the bytes of the checkpoint as mounted, or EIO; the daemon never dies.
//!
//! - a data shard or the `.index` truncated or rewritten in place: reads that need the file fail
//!   with EIO from then on (one log line names the file);
//! - a data shard or the `.index` deleted, or replaced by a rename: the mount keeps serving the
//!   files it opened (the mounted snapshot);
//! - a checkpoint directory whose `checkpoint` state file changes (a `CheckpointManager` adding
//!   and pruning checkpoints): the mount keeps showing what it mounted.
//!
//! Data is read through `O_DIRECT` descriptors, so each read reaches the daemon rather than the
//! kernel's page cache (which keeps what was served before a change: the mounted snapshot).

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::synthetic::*;
use common::*;

fn data_path(prefix: &Path, shard: u32) -> PathBuf {
    PathBuf::from(format!("{}.data-{shard:05}-of-00003", prefix.display()))
}

fn index_path(prefix: &Path) -> PathBuf {
    PathBuf::from(format!("{}.index", prefix.display()))
}

/// Rewrites every byte of the file (`len` bytes) in 64 KiB pieces, as a copy over it would.
fn rewrite_all(f: &std::fs::File, len: u64, seed: u64) {
    let junk = pseudo_bytes(seed, 64 << 10);
    let mut at = 0;
    while at < len {
        let n = (len - at).min(junk.len() as u64) as usize;
        f.write_all_at(&junk[..n], at).expect("write");
        at += n as u64;
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().expect("name").to_string_lossy().to_string()
}

/// A mount of `prefix` whose daemon logs at debug level (what it does with its leases).
fn mount_debug(prefix: &Path) -> Mount {
    Mount::start_env(prefix, &[], &[("RUST_LOG".into(), "debug".into())])
}

/// The daemon still runs and its mount answers.
fn assert_alive(m: &mut Mount) {
    let status = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
    assert!(
        status.is_none(),
        "the daemon exited: {status:?}\n{}",
        m.log_text()
    );
    assert!(is_mounted(&m.path()), "the mount is gone");
    std::fs::read_dir(m.path()).expect("the mount answers");
}

/// Every tensor reads as written.
fn assert_all_read(mnt: &Path, model: &BTreeMap<Vec<u8>, Expect>) {
    for e in model.values() {
        let got = read_direct(&bin_path(mnt, &e.key, ".bin")).expect("read");
        assert!(
            got == e.bin,
            "{}: wrong bytes",
            String::from_utf8_lossy(&e.key)
        );
    }
}

/// Which reads a change must fail.
#[derive(Clone, Copy)]
enum Changed {
    /// None.
    Nothing,
    /// Those of tensors stored in this shard.
    Shard(u32),
    /// All (the index changed, and no block of it is cached).
    Everything,
}

impl Changed {
    fn hits(self, e: &Expect) -> bool {
        match self {
            Changed::Nothing => false,
            Changed::Shard(s) => e.shards.contains(&s),
            Changed::Everything => true,
        }
    }
}

/// Reads the tensors of `model` over and over on 4 threads while `change` runs, and checks each
/// read returned the written bytes or failed with EIO, that every read begun after `change`
/// returned failed with EIO if `changed` says so, and that no other read failed.
fn read_while(
    mnt: &Path,
    model: &BTreeMap<Vec<u8>, Expect>,
    changed: Changed,
    change: impl FnOnce(),
) {
    let model = Arc::new(model.clone());
    let done = Arc::new(AtomicBool::new(false));
    let after = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..4)
        .map(|t| {
            let (model, done, after, reads) =
                (model.clone(), done.clone(), after.clone(), reads.clone());
            let mnt = mnt.to_path_buf();
            std::thread::spawn(move || -> Result<(u64, u64), String> {
                let (mut ok, mut eio) = (0u64, 0u64);
                let mut after_reads = 0;
                // Keep going until every tensor was read at least once after the change.
                while after_reads < 2 * model.len() {
                    for (i, e) in model.values().enumerate() {
                        if (i + t) % 4 != 0 && !done.load(Ordering::Relaxed) {
                            continue;
                        }
                        let began_after = after.load(Ordering::SeqCst);
                        let key = String::from_utf8_lossy(&e.key).to_string();
                        match read_direct(&bin_path(&mnt, &e.key, ".bin")) {
                            Ok(b) if b == e.bin => {
                                if began_after && changed.hits(e) {
                                    return Err(format!("{key}: read after the change"));
                                }
                                ok += 1;
                            }
                            Ok(_) => return Err(format!("{key}: WRONG BYTES")),
                            Err(err) if err.raw_os_error() == Some(libc::EIO) => {
                                if !changed.hits(e) {
                                    return Err(format!(
                                        "{key}: EIO, but what it needs did not change"
                                    ));
                                }
                                eio += 1;
                            }
                            Err(err) => return Err(format!("{key}: {err}")),
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                        if began_after {
                            after_reads += 1;
                        }
                    }
                }
                Ok((ok, eio))
            })
        })
        .collect();
    // Change the files once the readers are under way.
    while reads.load(Ordering::Relaxed) < 20 && !readers.iter().all(|r| r.is_finished()) {
        std::thread::yield_now();
    }
    change();
    after.store(true, Ordering::SeqCst);
    done.store(true, Ordering::Relaxed);
    let mut eio = 0;
    for r in readers {
        match r.join().expect("reader panicked") {
            Ok((_, e)) => eio += e,
            Err(e) => panic!("{e}"),
        }
    }
    if !matches!(changed, Changed::Nothing) {
        assert!(eio > 0, "no read failed");
    }
}

#[test]
fn data_shard_truncated_in_place_while_reading() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, model) = write_model(tmp.path(), 4096);
    age_files(&prefix);
    let mut m = Mount::start(&prefix, &[]);
    let mnt = m.path();
    assert_all_read(&mnt, &model);
    let shard0 = data_path(&prefix, 0);
    let len = std::fs::metadata(&shard0).expect("stat").len();
    read_while(&mnt, &model, Changed::Shard(0), || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&shard0)
            .expect("open")
            .set_len(len / 2)
            .expect("truncate");
    });
    assert_alive(&mut m);
    // Metadata comes from the index, which did not change.
    let e = &model[&b"dense/kernel".to_vec()];
    assert_eq!(
        std::fs::read_to_string(bin_path(&mnt, &e.key, ".shape")).expect("shape"),
        e.shape
    );
    let log = m.log_text();
    let name = file_name(&shard0);
    assert_eq!(
        log.matches(&format!("{name}: changed while mounted"))
            .count(),
        1,
        "one log line names the file:\n{log}"
    );
}

/// The same bytes count, other contents: without the check after each read the mount would
/// serve the new bytes (its CRC check of each tensor happens once).
#[test]
fn data_shard_rewritten_in_place_while_reading() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, model) = write_model(tmp.path(), 4096);
    age_files(&prefix);
    let mut m = Mount::start(&prefix, &[]);
    let mnt = m.path();
    assert_all_read(&mnt, &model);
    let shard2 = data_path(&prefix, 2);
    let len = std::fs::metadata(&shard2).expect("stat").len();
    read_while(&mnt, &model, Changed::Shard(2), || {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&shard2)
            .expect("open");
        rewrite_all(&f, len, 99);
    });
    assert_alive(&mut m);
    assert!(m.log_text().contains("changed while mounted"));
}

fn inode(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).expect("stat").ino()
}

/// Reads of the tensors in shard 2 fail with EIO; the others read as written.
fn assert_shard_2_fails(mnt: &Path, model: &BTreeMap<Vec<u8>, Expect>) {
    for e in model.values() {
        let got = read_direct(&bin_path(mnt, &e.key, ".bin"));
        let key = String::from_utf8_lossy(&e.key);
        if e.shards.contains(&2) {
            let err = got.expect_err(&format!("{key}: read after its shard was rewritten"));
            assert_eq!(err.raw_os_error(), Some(libc::EIO), "{key}: {err}");
        } else {
            assert!(got.expect("read") == e.bin, "{key}: wrong bytes");
        }
    }
}

/// A mapped reply is made only under a read lease on its file (so no writer can change the
/// bytes between the reply's check and the kernel's copy of them): the daemon holds one on each
/// shard it served from, lets go of it as soon as another process opens the shard for writing
/// (that `open` is not held for the kernel's 45 s), and from then on reads the shard with
/// `pread`, checked after each copy.
#[test]
fn a_writer_opening_a_mapped_shard_is_let_in_and_its_writes_are_caught() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, model) = write_model(tmp.path(), 4096);
    age_files(&prefix);
    let mut m = mount_debug(&prefix);
    let mnt = m.path();
    assert_all_read(&mnt, &model);
    let shard2 = data_path(&prefix, 2);
    let name = file_name(&shard2);
    let leased = leases_of(m.pid());
    assert!(
        leased.contains(&inode(&shard2)),
        "no lease on {name} ({}) among {leased:?}",
        inode(&shard2)
    );
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard2)
        .expect("open for writing");
    // The daemon let go (not the kernel, after its lease-break-time): it says so before.
    let log = m.log_text();
    assert!(
        log.contains(&format!("{name}: opened for writing by another process")),
        "{log}"
    );
    assert!(!leases_of(m.pid()).contains(&inode(&shard2)));
    // Opened, not written: every tensor still reads as written.
    assert_all_read(&mnt, &model);
    f.write_all_at(&pseudo_bytes(5, 16), 0).expect("write");
    assert_shard_2_fails(&mnt, &model);
    assert_alive(&mut m);
}

/// A shard someone has open for writing when it is mounted gets no lease: it is read with
/// `pread`, checked after each copy, from the first read, and a rewrite while reading is caught.
#[test]
fn a_shard_open_for_writing_at_mount_is_read_with_pread_and_its_rewrite_caught() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, model) = write_model(tmp.path(), 4096);
    age_files(&prefix);
    let shard2 = data_path(&prefix, 2);
    let writer = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard2)
        .expect("open for writing");
    let mut m = mount_debug(&prefix);
    let mnt = m.path();
    assert_all_read(&mnt, &model);
    let name = file_name(&shard2);
    let leased = leases_of(m.pid());
    assert!(!leased.contains(&inode(&shard2)), "{leased:?}");
    assert!(
        leased.contains(&inode(&data_path(&prefix, 0))),
        "{leased:?}"
    );
    let log = m.log_text();
    assert!(log.contains(&format!("{name}: no read lease")), "{log}");
    let len = std::fs::metadata(&shard2).expect("stat").len();
    read_while(&mnt, &model, Changed::Shard(2), || {
        rewrite_all(&writer, len, 98)
    });
    assert_shard_2_fails(&mnt, &model);
    assert_alive(&mut m);
}

/// Deleted, or replaced by a rename (as TensorFlow writes its files): the open files are what
/// was mounted, and keep being served. The same for the index, with no block cache, so every
/// lookup reads the index file.
#[test]
fn files_deleted_or_renamed_over_keep_serving_the_mounted_snapshot() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (prefix, model) = write_model(tmp.path(), 1024);
    let mut m = Mount::start(&prefix, &["-o", "cache_size=0"]);
    let mnt = m.path();
    let junk = tmp.path().join("junk");
    // Before anything is read (the daemon opened every file when it mounted)...
    std::fs::remove_file(data_path(&prefix, 0)).expect("rm shard 0");
    std::fs::write(&junk, pseudo_bytes(8, 4096)).expect("junk");
    std::fs::rename(&junk, index_path(&prefix)).expect("rename over the index");
    // ... and while reading.
    read_while(&mnt, &model, Changed::Nothing, || {
        std::fs::write(&junk, pseudo_bytes(7, 1 << 20)).expect("junk");
        std::fs::rename(&junk, data_path(&prefix, 1)).expect("rename over shard 1");
        std::fs::remove_file(data_path(&prefix, 2)).expect("rm shard 2");
    });
    assert_all_read(&mnt, &model);
    // Names never looked up before resolve through the old index.
    for i in 0..40 {
        let p = mnt.join(format!("variables/tower/layer_{i:02}/w.shape"));
        assert_eq!(
            std::fs::read_to_string(&p).expect("shape"),
            format!("17 {}\n", 3 + i)
        );
    }
    assert_alive(&mut m);
    assert!(!m.log_text().contains("ERROR"), "{}", m.log_text());
}

/// The index truncated, then rewritten in place, with no block cache, while tensors are read:
/// every read and every lookup that begins after the change fails with EIO (each needs an index
/// block); the daemon lives on.
#[test]
fn index_truncated_or_rewritten_in_place_while_reading() {
    for rewrite in [false, true] {
        let tmp = tempfile::tempdir().expect("tmp");
        let (prefix, model) = write_model(tmp.path(), 1024);
        age_files(&prefix);
        let mut m = Mount::start(&prefix, &["-o", "cache_size=0"]);
        let mnt = m.path();
        let index = index_path(&prefix);
        let len = std::fs::metadata(&index).expect("stat").len();
        // Leave the `tower/` names unused until after the change.
        let reading: BTreeMap<Vec<u8>, Expect> = model
            .into_iter()
            .filter(|(k, _)| !k.starts_with(b"tower/"))
            .collect();
        read_while(&mnt, &reading, Changed::Everything, || {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&index)
                .expect("open");
            if rewrite {
                f.write_all_at(&pseudo_bytes(5, len as usize), 0)
                    .expect("rewrite");
            } else {
                f.set_len(len / 3).expect("truncate");
            }
        });
        for i in 0..40 {
            let p = mnt.join(format!("variables/tower/layer_{i:02}/w.shape"));
            let err = std::fs::metadata(&p).expect_err("lookup after the change");
            assert_eq!(
                err.raw_os_error(),
                Some(libc::EIO),
                "{}: {err}",
                p.display()
            );
        }
        let err = std::fs::read_dir(mnt.join("variables/tower"))
            .and_then(|d| d.collect::<Result<Vec<_>, _>>())
            .expect_err("listing after the change");
        assert_eq!(err.raw_os_error(), Some(libc::EIO));
        assert_alive(&mut m);
        let name = index
            .file_name()
            .expect("name")
            .to_string_lossy()
            .to_string();
        let log = m.log_text();
        assert_eq!(
            log.matches(&format!("{name}: changed while mounted"))
                .count(),
            1,
            "one log line names the file:\n{log}"
        );
    }
}

/// A `CheckpointManager` directory: while mounted, a new checkpoint is saved, the state file is
/// replaced (by a rename, as TensorFlow does) and then rewritten in place, and the oldest
/// checkpoint is deleted (`max_to_keep`). Mounted with `-o nolive`, the mount keeps showing the checkpoints it mounted,
/// with `latest` where it was, and the deleted one still reads.
#[test]
fn checkpoint_directory_changing_keeps_serving_what_was_mounted() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let mut models = Vec::new();
    for i in 1..=3u64 {
        models.push(write_model_at(&dir.join(format!("ckpt-{i}")), 4096, i));
    }
    let state = |ids: &[u64]| {
        let mut s = format!("model_checkpoint_path: \"ckpt-{}\"\n", ids[ids.len() - 1]);
        for i in ids {
            s.push_str(&format!("all_model_checkpoint_paths: \"ckpt-{i}\"\n"));
        }
        s
    };
    std::fs::write(dir.join("checkpoint"), state(&[1, 2, 3])).expect("state");
    // A snapshot mount (`-o nolive`): tests/mount/live.rs covers following the directory.
    let mut m = Mount::start(dir, &["-o", "nolive"]);
    let mnt = m.path();
    let names = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .expect("readdir")
            .map(|e| e.expect("dirent").file_name().to_string_lossy().to_string())
            .collect();
        v.sort();
        v
    };
    let before = names(&mnt);
    assert_eq!(before, ["ckpt-1", "ckpt-2", "ckpt-3", "latest"]);

    write_model_at(&dir.join("ckpt-4"), 4096, 4);
    std::fs::write(dir.join("checkpoint.tmp"), state(&[2, 3, 4])).expect("state");
    std::fs::rename(dir.join("checkpoint.tmp"), dir.join("checkpoint")).expect("rename");
    for e in std::fs::read_dir(dir).expect("readdir") {
        let e = e.expect("dirent");
        if e.file_name().to_string_lossy().starts_with("ckpt-1.") {
            std::fs::remove_file(e.path()).expect("prune");
        }
    }
    std::fs::write(dir.join("checkpoint"), "garbage {{{").expect("rewrite in place");

    assert_eq!(names(&mnt), before);
    assert_eq!(
        std::fs::read_link(mnt.join("latest")).expect("latest"),
        PathBuf::from("ckpt-3")
    );
    for (i, model) in models.iter().enumerate() {
        let view = mnt.join(format!("ckpt-{}", i + 1));
        assert_all_read(&view, model);
    }
    assert_alive(&mut m);
}

/// Local tensors are verified while streamed (`docs/integrity.md`): through the mount, a
/// healthy tensor read from its end first (the read-around of a reader that maps the file) is
/// served exact, its last read reading the part no read covered; a damaged one serves the reads
/// before its end, fails the read that reaches it (EIO, one log line naming the data file), and
/// keeps failing. `-o crc_first` fails its first read.
#[test]
fn local_tensors_are_verified_while_streamed() {
    use tfmount::testkit::writer::CheckpointWriter;
    const MIB: usize = 1 << 20;
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("ckpt");
    let good = tfmount::testkit::rng::bytes(7, 4 * MIB);
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    w.add(b"good", F32, &[MIB as u64], &good, 0).expect("add");
    w.add(b"bad", F32, &[MIB as u64], &good, 0).expect("add");
    w.finish().expect("finish");
    // One byte of `bad` (stored second) flipped, 3 MiB into it.
    let data = PathBuf::from(format!("{}.data-00000-of-00001", prefix.display()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&data)
        .expect("open data");
    let at = (4 * MIB + 3 * MIB) as u64;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read byte");
    f.write_all_at(&[b[0] ^ 0x20], at).expect("flip");
    drop(f);
    age_files(&prefix);

    let direct = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(p)
            .expect("open O_DIRECT")
    };
    let mut page = vec![0u8; 1 << 16];
    let m = Mount::start(&prefix, &[]);
    let bin = |k: &str| m.path().join(format!("variables/{k}.bin"));
    // The healthy tensor, its last 64 KiB first: exact (the gap before it read by that read).
    let g = direct(&bin("good"));
    let end = (4 * MIB - page.len()) as u64;
    assert_eq!(
        g.read_at(&mut page, end).expect("good, end first"),
        page.len()
    );
    assert!(
        page[..] == good[end as usize..],
        "good: wrong bytes at its end"
    );
    assert!(read_direct(&bin("good")).expect("good, whole") == good);
    // The damaged one: its first MiB is served (not verified yet), the read reaching its end
    // fails, and so does every read after.
    let d = direct(&bin("bad"));
    assert_eq!(
        d.read_at(&mut page, 0).expect("bad, first read"),
        page.len()
    );
    assert!(page[..] == good[..page.len()]);
    let e = read_direct(&bin("bad")).expect_err("bad read to its end");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let e = d.read_at(&mut page, 0).expect_err("bad, again");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let log = m.log_text();
    let name = data
        .file_name()
        .expect("name")
        .to_string_lossy()
        .to_string();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("ERROR") && l.contains(&name))
            .count(),
        1,
        "one line names the data file:\n{log}"
    );
    drop((g, d));
    drop(m);

    let m = Mount::start(&prefix, &["-o", "crc_first"]);
    let d = direct(&m.path().join("variables/bad.bin"));
    let e = d
        .read_at(&mut page, 0)
        .expect_err("crc_first: the first read fails");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let g = direct(&m.path().join("variables/good.bin"));
    assert_eq!(
        g.read_at(&mut page, 0).expect("crc_first: good"),
        page.len()
    );
    assert!(page[..] == good[..page.len()]);
}
