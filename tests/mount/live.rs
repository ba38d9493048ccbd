//! Live checkpoint directories through the kernel: a checkpoint directory with a state file is
//! followed while mounted. Real TensorFlow writes while mounted (CheckpointManager and a TF1
//! Saver, both `max_to_keep=2`); state files caught half-written or deleted; a data shard that
//! appears after its index; copies that pause longer than the grace (`-o live_grace`), and a
//! mount made mid-copy; 100 saves in quick succession; files open on a pruned checkpoint.
//!
//! The TensorFlow tests need a Python with TensorFlow (src/testkit/requires.rs finds it;
//! `scripts/test.sh` installs `tensorflow-cpu`); without one they are skipped and reported.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{f32_bytes, latest, open_fds, state, write_state, Mount};
use tfmount::parse::dtype::DType;
use tfmount::testkit::writer::CheckpointWriter;

const DT_FLOAT: DType = DType(1);

/// How soon a change must show (the README's promise).
const WITHIN: Duration = Duration::from_secs(2);

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
        // TF's CheckpointManager.save writes the state file twice: naming the new checkpoint
        // beside every old one, then (after deleting the oldest's files) without the oldest.
        // The mount may show the first state (four entries, `latest` already moved) until it
        // applies the second: what is waited for is the second, settled (max_to_keep=2: the
        // one before the previous is gone).
        let took = common::within(
            WITHIN,
            &format!("{name} appears, latest moves to it and the oldest goes"),
            || {
                let listing = common::dir_names(&mnt);
                listing.contains(&name) && latest(&mnt) == name && listing.len() == 3
            },
        );
        eprintln!("{mode}: {name} shown after {took:?}");
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
    followed_run_and_staging_with(&[])
}

/// A temporary directory with an empty training directory `run/` and a `staging/` beside it.
fn run_and_staging() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("run");
    let staging = tmp.path().join("staging");
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::create_dir_all(&staging).expect("mkdir");
    (tmp, dir, staging)
}

/// [`followed_run_and_staging`], mounted with `opts`.
fn followed_run_and_staging_with(opts: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf, Mount) {
    let (tmp, dir, staging) = run_and_staging();
    write_ckpt(&dir, "ckpt-1", &[1.0; 4]);
    write_state(&dir, &["ckpt-1"]);
    let m = Mount::start(&dir, opts);
    (tmp, dir, staging, m)
}

/// The values of both tensors of [`two_tensors`].
fn two_tensor_values() -> Vec<f32> {
    (0..65_536).map(|i| i as f32).collect()
}

/// A checkpoint `dir/name` of two float32 tensors `a` and `b` of 64 Ki elements each (the
/// second after the first in its 512 KiB data shard); the data shard's bytes.
fn two_tensors(dir: &Path, name: &str) -> Vec<u8> {
    let vals = two_tensor_values();
    let prefix = dir.join(name);
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    w.add(b"a", DT_FLOAT, &[65_536], &f32_bytes(&vals), 0)
        .expect("add");
    w.add(b"b", DT_FLOAT, &[65_536], &f32_bytes(&vals), 0)
        .expect("add");
    w.finish().expect("finish");
    std::fs::read(dir.join(format!("{name}.data-00000-of-00001"))).expect("data")
}

/// Where a copy of [`two_tensors`] pauses: after 300 KiB of the data shard (`a` whole, `b` cut).
const HALF: usize = 300 << 10;

/// A copy of checkpoint `staging/name` into `dir` caught half-way: its index whole, the first
/// [`HALF`] bytes of its data shard (`data`). Returns the shard, open to write the rest to.
fn copy_half(staging: &Path, dir: &Path, name: &str, data: &[u8]) -> std::fs::File {
    std::fs::copy(
        staging.join(format!("{name}.index")),
        dir.join(format!("{name}.index")),
    )
    .expect("index");
    let mut f =
        std::fs::File::create(dir.join(format!("{name}.data-00000-of-00001"))).expect("create");
    Write::write_all(&mut f, &data[..HALF]).expect("first part");
    Write::flush(&mut f).expect("flush");
    f
}

/// The rest of a copy started with [`copy_half`].
fn copy_rest(mut f: std::fs::File, data: &[u8]) {
    Write::write_all(&mut f, &data[HALF..]).expect("the rest");
    Write::flush(&mut f).expect("flush");
}

/// Whether `mnt/ckpt/variables` lists `a.bin` and `b.bin`, and each reads `vals`.
fn variables_read(mnt: &Path, ckpt: &str, vals: &[f32]) -> bool {
    let vars = mnt.join(ckpt).join("variables");
    let Ok(listing) = std::fs::read_dir(&vars) else {
        return false;
    };
    let mut bins: Vec<String> = listing
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".bin"))
        .collect();
    bins.sort();
    bins == ["a.bin", "b.bin"]
        && bins
            .iter()
            .all(|b| std::fs::read(vars.join(b)).is_ok_and(|got| got == f32_bytes(vals)))
}

/// Whether reading `p` fails with EIO.
fn eio(p: &Path) -> bool {
    std::fs::read(p).err().and_then(|e| e.raw_os_error()) == Some(libc::EIO)
}

/// How soon a checkpoint shown as it is is shown anew once its files grew: `-o live_grace=1s`
/// (the grace the re-opened one may wait, its files having just grown), the 1 s poll, and a
/// margin.
const REOPENED: Duration = Duration::from_secs(6);

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
    let data = two_tensors(&staging, "ckpt-2");
    // The index, and the first 300 KiB of 512: tensor `a` whole, `b` cut.
    let f = copy_half(&staging, &dir, "ckpt-2", &data);
    write_state(&dir, &["ckpt-1", "ckpt-2"]);
    common::stays(
        Duration::from_millis(1500),
        "ckpt-2 shown with a shard shorter than its index says",
        || !common::dir_names(&mnt).contains(&"ckpt-2".to_string()),
    );
    copy_rest(f, &data);
    common::within(WITHIN, "ckpt-2 appears once its shard is whole", || {
        common::dir_names(&mnt).contains(&"ckpt-2".to_string())
    });
    let vals = two_tensor_values();
    for t in ["a", "b"] {
        assert_eq!(
            std::fs::read(mnt.join(format!("ckpt-2/variables/{t}.bin"))).expect("read"),
            f32_bytes(&vals),
            "{t}"
        );
    }
}

/// A copy that pauses longer than the grace: the checkpoint the state file names at mount has
/// half its data shard, is shown as it is once the grace passed (`b` fails with EIO), and the
/// rest of the shard is written after that. It is opened again and shown anew: every tensor,
/// through its own name and through `latest`, reads right. (It stayed broken: every read of
/// `b.bin` failed with EIO until remounted.)
#[test]
fn a_checkpoint_shown_as_it_is_at_mount_is_shown_anew_once_its_shard_grows() {
    let (_tmp, dir, staging) = run_and_staging();
    let data = two_tensors(&staging, "ckpt-1");
    let f = copy_half(&staging, &dir, "ckpt-1", &data);
    write_state(&dir, &["ckpt-1"]);
    let m = Mount::start(&dir, &["-o", "live_grace=1s"]);
    let mnt = m.path();
    common::within(REOPENED, "ckpt-1 shown as it is after the grace", || {
        common::dir_names(&mnt) == ["ckpt-1", "latest"]
    });
    assert!(eio(&mnt.join("ckpt-1/variables/b.bin")), "b is cut: EIO");
    assert!(eio(&mnt.join("latest/variables/b.bin")), "b is cut: EIO");
    copy_rest(f, &data);
    let vals = two_tensor_values();
    common::within(
        REOPENED,
        "every tensor reads right once the copy ended",
        || variables_read(&mnt, "ckpt-1", &vals) && variables_read(&mnt, "latest", &vals),
    );
    assert_eq!(latest(&mnt), "ckpt-1");
}

/// As above for a checkpoint that appears in a running mount: `ckpt-2`, named by the state
/// file with half its data shard, shown as it is after the grace, then completed.
#[test]
fn a_new_checkpoint_shown_as_it_is_is_shown_anew_once_its_shard_grows() {
    let (_tmp, dir, staging, m) = followed_run_and_staging_with(&["-o", "live_grace=1s"]);
    let mnt = m.path();
    let data = two_tensors(&staging, "ckpt-2");
    let f = copy_half(&staging, &dir, "ckpt-2", &data);
    write_state(&dir, &["ckpt-1", "ckpt-2"]);
    common::within(REOPENED, "ckpt-2 shown as it is after the grace", || {
        common::dir_names(&mnt) == ["ckpt-1", "ckpt-2", "latest"] && latest(&mnt) == "ckpt-2"
    });
    assert!(eio(&mnt.join("ckpt-2/variables/b.bin")), "b is cut: EIO");
    copy_rest(f, &data);
    let vals = two_tensor_values();
    common::within(
        REOPENED,
        "every tensor reads right once the copy ended",
        || variables_read(&mnt, "ckpt-2", &vals) && variables_read(&mnt, "latest", &vals),
    );
    // The checkpoint shown before is untouched.
    assert_eq!(
        std::fs::read(mnt.join("ckpt-1/variables/v.bin")).expect("ckpt-1"),
        f32_bytes(&[1.0; 4])
    );
}

/// A mount made while a copy is under way: `ckpt-1` complete, `ckpt-2` half copied, the state
/// file naming both. The checkpoints listed at mount get the readiness check new ones get:
/// `ckpt-2` is not shown, and `latest` (which never names a checkpoint not shown) is `ckpt-1`,
/// the newest shown of those the state file lists. Once the copy is complete `ckpt-2` is shown
/// with its bytes, and `latest` moves to it. (`ckpt-2` was shown at mount, half of it EIO.)
#[test]
fn a_mount_made_mid_copy_shows_the_half_copied_checkpoint_once_complete() {
    let (_tmp, dir, staging) = run_and_staging();
    write_ckpt(&dir, "ckpt-1", &[1.0; 4]);
    let data = two_tensors(&staging, "ckpt-2");
    let f = copy_half(&staging, &dir, "ckpt-2", &data);
    write_state(&dir, &["ckpt-1", "ckpt-2"]);
    // A grace far longer than the test: ckpt-2 is never shown as it is.
    let m = Mount::start(&dir, &["-o", "live_grace=10m"]);
    let mnt = m.path();
    common::stays(
        Duration::from_millis(1500),
        "a half-copied ckpt-2 is not shown, latest is ckpt-1",
        || common::dir_names(&mnt) == ["ckpt-1", "latest"] && latest(&mnt) == "ckpt-1",
    );
    assert_eq!(
        std::fs::read(mnt.join("latest/variables/v.bin")).expect("via latest"),
        f32_bytes(&[1.0; 4])
    );
    copy_rest(f, &data);
    let vals = two_tensor_values();
    common::within(WITHIN, "ckpt-2 shown once complete, latest on it", || {
        common::dir_names(&mnt) == ["ckpt-1", "ckpt-2", "latest"] && latest(&mnt) == "ckpt-2"
    });
    assert!(variables_read(&mnt, "ckpt-2", &vals), "ckpt-2 reads right");
    assert!(variables_read(&mnt, "latest", &vals), "latest reads right");
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
