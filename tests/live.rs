//! Live checkpoint directories through the kernel: a checkpoint directory with a state file is
//! followed while mounted. Real TensorFlow writes while mounted (CheckpointManager and a TF1
//! Saver, both `max_to_keep=2`); state files caught half-written or deleted; a data shard that
//! appears after its index; 100 saves in quick succession; files open on a pruned checkpoint.
//!
//! The TensorFlow tests need a Python with TensorFlow (src/testkit/requires.rs finds it;
//! `scripts/test.sh` installs `tensorflow-cpu`); without one they are skipped and reported.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{state, write_state, Mount};
use tfmount::parse::dtype::DType;
use tfmount::testkit::writer::CheckpointWriter;

const DT_FLOAT: DType = DType(1);

/// How soon a change must show (the README's promise).
const WITHIN: Duration = Duration::from_secs(2);

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A checkpoint `dir/name` with one float32 tensor `v` of 4 elements.
fn write_ckpt(dir: &Path, name: &str, vals: &[f32]) -> PathBuf {
    let prefix = dir.join(name);
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    w.add(b"v", DT_FLOAT, &[4], &f32_bytes(vals), 0)
        .expect("add");
    w.finish().expect("finish");
    prefix
}

fn prune(dir: &Path, name: &str) {
    for e in std::fs::read_dir(dir).expect("readdir") {
        let e = e.expect("dirent");
        if e.file_name()
            .to_string_lossy()
            .starts_with(&format!("{name}."))
        {
            std::fs::remove_file(e.path()).expect("rm");
        }
    }
}

fn latest(mnt: &Path) -> String {
    std::fs::read_link(mnt.join("latest"))
        .map(|p| p.to_string_lossy().to_string())
        .unwrap_or_default()
}

/// Real TensorFlow saves three more checkpoints while the directory is mounted; after each the
/// listing, `latest` and the new checkpoint's values are checked.
fn tf_saves_while_mounted(mode: &str, key_path: &str) {
    let Some(py) = common::requires::python("tensorflow, numpy", "") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/live_writer.py");
    let mut child = Command::new(py)
        .arg(&script)
        .arg(mode)
        .arg(dir)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("live_writer.py");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("ready");
    assert_eq!(line.trim(), "ready", "live_writer.py: {line}");
    let m = Mount::start(dir, &[]);
    let mnt = m.path();
    let first = common::dir_names(&mnt);
    assert_eq!(first.len(), 3, "two checkpoints and latest: {first:?}");
    let mut shown = first;
    for _ in 0..3 {
        writeln!(stdin, "next").expect("next");
        stdin.flush().expect("flush");
        line.clear();
        out.read_line(&mut line).expect("saved");
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f.first(), Some(&"saved"), "{line}");
        let name = f[1].to_string();
        let vals: Vec<f32> = f[2..].iter().map(|v| v.parse().expect("value")).collect();
        let took = common::within(
            WITHIN,
            &format!("{name} appears and latest moves to it"),
            || common::dir_names(&mnt).contains(&name) && latest(&mnt) == name,
        );
        eprintln!("{mode}: {name} shown after {took:?}");
        // max_to_keep=2: the one before the previous is gone.
        let listing = common::dir_names(&mnt);
        assert_eq!(listing.len(), 3, "{listing:?}");
        assert!(listing.contains(&"latest".to_string()), "{listing:?}");
        assert_ne!(listing, shown, "the listing changed");
        shown = listing;
        let bin = mnt.join(&name).join("variables").join(key_path);
        assert_eq!(
            std::fs::read(&bin).expect("new tensor"),
            f32_bytes(&vals),
            "{}",
            bin.display()
        );
        assert_eq!(
            std::fs::read(mnt.join("latest/variables").join(key_path)).expect("via latest"),
            f32_bytes(&vals)
        );
        // The new checkpoint's model.safetensors holds the same values under TF's key.
        let st = std::fs::read(mnt.join(&name).join("model.safetensors")).expect("safetensors");
        let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes")) as usize;
        let header: serde_json::Value = serde_json::from_slice(&st[8..8 + n]).expect("header");
        let key = key_path.strip_suffix(".bin").expect("a .bin path");
        let offs = header[key]["data_offsets"]
            .as_array()
            .expect("the tensor is in it");
        let (a, b) = (
            offs[0].as_u64().expect("begin") as usize,
            offs[1].as_u64().expect("end") as usize,
        );
        assert_eq!(st[8 + n + a..8 + n + b], f32_bytes(&vals)[..]);
    }
    drop(stdin);
    let _ = child.wait();
}

#[test]
fn tf2_checkpoint_manager_saves_while_mounted() {
    tf_saves_while_mounted("tf2", "v/.ATTRIBUTES/VARIABLE_VALUE.bin");
}

#[test]
fn tf1_saver_saves_while_mounted() {
    tf_saves_while_mounted("tf1", "v.bin");
}

/// A state file written in two halves: the mount keeps the last complete state until the
/// second half is written. Then the state file is deleted (nothing changes) and written again.
#[test]
fn half_written_and_deleted_state_files_keep_the_last_complete_state() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    write_ckpt(dir, "ckpt-1", &[1.0; 4]);
    write_ckpt(dir, "ckpt-2", &[2.0; 4]);
    write_state(dir, &["ckpt-1"]);
    let m = Mount::start(dir, &[]);
    let mnt = m.path();
    assert_eq!(common::dir_names(&mnt), ["ckpt-1", "latest"]);
    // Two halves, the file closed in between (the worst case for a reader).
    let text = state(&["ckpt-1", "ckpt-2"]);
    let half = text.len() / 2;
    std::fs::write(dir.join("checkpoint"), &text[..half]).expect("half");
    common::stays(
        Duration::from_millis(1500),
        "a half-written state file",
        || common::dir_names(&mnt) == ["ckpt-1", "latest"] && latest(&mnt) == "ckpt-1",
    );
    std::fs::write(dir.join("checkpoint"), &text).expect("whole");
    common::within(WITHIN, "the complete state applies", || {
        common::dir_names(&mnt) == ["ckpt-1", "ckpt-2", "latest"] && latest(&mnt) == "ckpt-2"
    });
    // Deleted: the mount keeps what it shows.
    std::fs::remove_file(dir.join("checkpoint")).expect("rm");
    common::stays(
        Duration::from_millis(1500),
        "the state file deleted",
        || common::dir_names(&mnt) == ["ckpt-1", "ckpt-2", "latest"],
    );
    write_state(dir, &["ckpt-2"]);
    common::within(WITHIN, "written again", || {
        common::dir_names(&mnt) == ["ckpt-2", "latest"] && latest(&mnt) == "ckpt-2"
    });
    assert_eq!(
        std::fs::read(mnt.join("ckpt-2/variables/v.bin")).expect("read"),
        f32_bytes(&[2.0; 4])
    );
}

/// A followed training directory `run/` holding `ckpt-1` (state file naming it), mounted, and a
/// `staging/` beside it where the next checkpoint is written before it is copied in.
fn followed_run_and_staging() -> (tempfile::TempDir, PathBuf, PathBuf, Mount) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("run");
    let staging = tmp.path().join("staging");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::create_dir_all(&staging).expect("mkdir");
    write_ckpt(&dir, "ckpt-1", &[1.0; 4]);
    write_state(&dir, &["ckpt-1"]);
    let m = Mount::start(&dir, &[]);
    (tmp, dir, staging, m)
}

/// A checkpoint whose data shard appears after its index (and after the state file names it)
/// is shown once the shard is there, with its bytes.
#[test]
fn data_shard_appearing_after_the_index() {
    let (_tmp, dir, staging, m) = followed_run_and_staging();
    let mnt = m.path();
    write_ckpt(&staging, "ckpt-2", &[7.0, 8.0, 9.0, 10.0]);
    std::fs::copy(staging.join("ckpt-2.index"), dir.join("ckpt-2.index")).expect("index");
    write_state(&dir, &["ckpt-1", "ckpt-2"]);
    common::stays(
        Duration::from_millis(1200),
        "ckpt-2 without its data",
        || !common::dir_names(&mnt).contains(&"ckpt-2".to_string()),
    );
    std::fs::copy(
        staging.join("ckpt-2.data-00000-of-00001"),
        dir.join("ckpt-2.data-00000-of-00001"),
    )
    .expect("data");
    common::within(WITHIN, "ckpt-2 appears with its data", || {
        common::dir_names(&mnt).contains(&"ckpt-2".to_string())
    });
    assert_eq!(
        std::fs::read(mnt.join("ckpt-2/variables/v.bin")).expect("read"),
        f32_bytes(&[7.0, 8.0, 9.0, 10.0])
    );
}

/// A data shard copied in over time (`cp -r`, `gsutil cp` and `rsync` write a checkpoint's files
/// in any order, each over time): the checkpoint is not shown while its shard is shorter than
/// the extents its index names, and once it is whole every byte reads right. (It was shown as
/// soon as the shard existed, and its reads failed for good.)
#[test]
fn data_shard_written_in_pieces_after_the_index() {
    let (_tmp, dir, staging, m) = followed_run_and_staging();
    let mnt = m.path();
    // Two tensors, the second after the first in the shard.
    let vals: Vec<f32> = (0..65_536).map(|i| i as f32).collect();
    let prefix = staging.join("ckpt-2");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    w.add(b"a", DT_FLOAT, &[65_536], &f32_bytes(&vals), 0)
        .expect("add");
    w.add(b"b", DT_FLOAT, &[65_536], &f32_bytes(&vals), 0)
        .expect("add");
    w.finish().expect("finish");
    let data = std::fs::read(staging.join("ckpt-2.data-00000-of-00001")).expect("data");
    std::fs::copy(staging.join("ckpt-2.index"), dir.join("ckpt-2.index")).expect("index");
    write_state(&dir, &["ckpt-1", "ckpt-2"]);
    // The first 300 KiB of 512: tensor `a` whole, `b` cut.
    let target = dir.join("ckpt-2.data-00000-of-00001");
    let mut f = std::fs::File::create(&target).expect("create");
    Write::write_all(&mut f, &data[..300 << 10]).expect("first part");
    Write::flush(&mut f).expect("flush");
    common::stays(
        Duration::from_millis(1500),
        "ckpt-2 shown with a shard shorter than its index says",
        || !common::dir_names(&mnt).contains(&"ckpt-2".to_string()),
    );
    Write::write_all(&mut f, &data[300 << 10..]).expect("the rest");
    drop(f);
    common::within(WITHIN, "ckpt-2 appears once its shard is whole", || {
        common::dir_names(&mnt).contains(&"ckpt-2".to_string())
    });
    for t in ["a", "b"] {
        assert_eq!(
            std::fs::read(mnt.join(format!("ckpt-2/variables/{t}.bin"))).expect("read"),
            f32_bytes(&vals),
            "{t}"
        );
    }
}

/// Open files of a pruned checkpoint keep reading what they opened.
#[test]
fn files_open_on_a_pruned_checkpoint_keep_reading() {
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    write_ckpt(dir, "ckpt-1", &[1.0, 2.0, 3.0, 4.0]);
    write_state(dir, &["ckpt-1"]);
    let m = Mount::start(dir, &[]);
    let mnt = m.path();
    let f = std::fs::File::open(mnt.join("ckpt-1/variables/v.bin")).expect("open");
    write_ckpt(dir, "ckpt-2", &[2.0; 4]);
    write_state(dir, &["ckpt-2"]);
    prune(dir, "ckpt-1");
    // The listing changes, then the kernel's cached name is dropped (two steps that cannot be
    // one: the notification must not wait on a lookup): both within WITHIN.
    common::within(
        WITHIN,
        "ckpt-1 leaves the listing and stops resolving",
        || {
            common::dir_names(&mnt) == ["ckpt-2", "latest"]
                && std::fs::metadata(mnt.join("ckpt-1")).is_err()
        },
    );
    let mut buf = [0u8; 16];
    f.read_exact_at(&mut buf, 0).expect("read of the open file");
    assert_eq!(buf.to_vec(), f32_bytes(&[1.0, 2.0, 3.0, 4.0]));
}

fn proc_status(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// inotify watches held by a process: the `inotify wd:` lines of its inotify descriptors.
fn inotify_watches(pid: u32) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("fdinfo") {
        let text = std::fs::read_to_string(e.expect("fd").path()).unwrap_or_default();
        n += text
            .lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .count();
    }
    n
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// 100 saves in quick succession (max_to_keep=2), each read through the mount: the listing
/// ends right, the daemon's memory and descriptors stay flat, and it holds one inotify watch.
#[test]
fn hundred_saves_in_quick_succession() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    write_ckpt(dir, "ckpt-0", &[0.0; 4]);
    write_state(dir, &["ckpt-0"]);
    let m = Mount::start(dir, &[]);
    let mnt = m.path();
    let pid = m.pid();
    let rss0 = proc_status(pid, "RssAnon:");
    let fds0 = open_fds(pid);
    for i in 1..=100 {
        let name = format!("ckpt-{i}");
        write_ckpt(dir, &name, &[i as f32; 4]);
        let prev = format!("ckpt-{}", i - 1);
        write_state(dir, &[&prev, &name]);
        if i >= 2 {
            prune(dir, &format!("ckpt-{}", i - 2));
        }
        // Every tenth save is read through the mount as soon as it shows.
        if i % 10 == 0 {
            common::within(WITHIN, &format!("{name} shows"), || latest(&mnt) == name);
            assert_eq!(
                std::fs::read(mnt.join(&name).join("variables/v.bin")).expect("read"),
                f32_bytes(&[i as f32; 4])
            );
        }
    }
    common::within(WITHIN, "the last state applies", || {
        common::dir_names(&mnt) == ["ckpt-100", "ckpt-99", "latest"]
    });
    // Let the kernel forget the pruned checkpoints' inodes (dropping caches forgets them).
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
    std::thread::sleep(Duration::from_millis(1500));
    let rss1 = proc_status(pid, "RssAnon:");
    let fds1 = open_fds(pid);
    eprintln!("RssAnon {rss0} -> {rss1} KiB, fds {fds0} -> {fds1}");
    assert_eq!(inotify_watches(pid), 1, "one inotify watch");
    assert!(
        fds1 <= fds0 + 8,
        "pruned checkpoints' files are closed: {fds0} -> {fds1} descriptors"
    );
    assert!(
        rss1 <= rss0 + 8 * 1024,
        "memory stays flat: RssAnon {rss0} -> {rss1} KiB"
    );
}

/// `-o nolive`: the mount is a snapshot of the directory at mount time.
#[test]
fn nolive_is_a_snapshot() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    write_ckpt(dir, "ckpt-1", &[1.0; 4]);
    write_state(dir, &["ckpt-1"]);
    let m = Mount::start(dir, &["-o", "nolive"]);
    let mnt = m.path();
    write_ckpt(dir, "ckpt-2", &[2.0; 4]);
    write_state(dir, &["ckpt-2"]);
    common::stays(Duration::from_millis(1500), "a nolive mount", || {
        common::dir_names(&mnt) == ["ckpt-1", "latest"] && latest(&mnt) == "ckpt-1"
    });
}

/// Polls `f` every millisecond until it holds or `WITHIN` has passed.
fn soon(what: &str, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < WITHIN, "not within {WITHIN:?}: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The daemon's anonymous memory (KiB) and open descriptors, once the kernel had time to
/// forget what was pruned.
fn settled_footprint(pid: u32) -> (u64, usize) {
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "2");
    std::thread::sleep(Duration::from_millis(1500));
    (proc_status(pid, "RssAnon:"), open_fds(pid))
}

/// A job saving every 10 minutes for ten weeks: 10,000 saves (max_to_keep=2) into a mounted
/// directory, each waited for and read through the mount. Every checkpoint appears (each
/// takes two subtree ids, so without reusing the ids of pruned checkpoints the mount stopped
/// showing new ones after about 2,047), and the daemon's memory and descriptors stay flat
/// between save 1,000 and save 10,000. Takes about 30 s in a debug build.
#[test]
fn ten_thousand_saves_every_one_shown() {
    const SAVES: usize = 10_000;
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path();
    write_ckpt(dir, "ckpt-0", &[0.0; 4]);
    write_state(dir, &["ckpt-0"]);
    // The caches shared by all checkpoints (index blocks, CRC outcomes) are bounded by bytes
    // and keep entries of pruned checkpoints until evicted: with them on, memory grows until
    // they are full (about 0.5 KiB a save here), which would hide a leak of the checkpoints
    // themselves. Off, what is left is the daemon's own footprint.
    let m = Mount::start(dir, &["-o", "cache_size=0,nocrc"]);
    let mnt = m.path();
    let pid = m.pid();
    let t0 = Instant::now();
    let mut at_1000 = (0, 0);
    for i in 1..=SAVES {
        let name = format!("ckpt-{i}");
        write_ckpt(dir, &name, &[i as f32; 4]);
        let prev = format!("ckpt-{}", i - 1);
        write_state(dir, &[&prev, &name]);
        if i >= 2 {
            prune(dir, &format!("ckpt-{}", i - 2));
        }
        soon(&format!("{name} shows (save {i})"), || latest(&mnt) == name);
        assert_eq!(
            std::fs::read(mnt.join(&name).join("variables/v.bin"))
                .unwrap_or_else(|e| panic!("{name}: {e}")),
            f32_bytes(&[i as f32; 4]),
            "{name}"
        );
        if i == 1000 {
            at_1000 = settled_footprint(pid);
        }
    }
    let saves_took = t0.elapsed();
    soon("the last state applies", || {
        common::dir_names(&mnt)
            == [
                format!("ckpt-{SAVES}"),
                format!("ckpt-{}", SAVES - 1),
                "latest".into(),
            ]
    });
    let at_end = settled_footprint(pid);
    eprintln!(
        "{SAVES} saves in {saves_took:?}; RssAnon {} -> {} KiB, fds {} -> {} (save 1,000 -> {SAVES})",
        at_1000.0, at_end.0, at_1000.1, at_end.1
    );
    assert!(
        at_end.1 <= at_1000.1 + 2,
        "descriptors stay flat: {} -> {}",
        at_1000.1,
        at_end.1
    );
    assert!(
        at_end.0 <= at_1000.0 + 1024,
        "memory stays flat: RssAnon {} -> {} KiB",
        at_1000.0,
        at_end.0
    );
}
