//! Editable mounts (`-o edit=DIR`, docs/edit.md) through the kernel: `rm`, `rm -r`, `mv` of a
//! file and of a directory, `cp x.npy`, numpy's `save`, a write to a temporary name renamed
//! into place, `truncate`, a partial write, garbage, a `.bin` of the wrong size; every view
//! agrees, `tfmount edits` lists exactly what was done, the edits survive a remount and a
//! daemon killed in the middle of a `cp`, readers see old or new values whole, and `tfmount
//! commit` writes what TensorFlow restores into the renamed structure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{self, fixtures, tfmount, tfmount_ok, Mount};

/// An `.npy` of float32 values (numpy's layout, written here, not by tfmount).
fn npy_f32(shape: &[u64], values: &[f32]) -> Vec<u8> {
    let dims = match shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", shape[0]),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let dict = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {dims}, }}");
    let total = (10 + dict.len() + 1).div_ceil(64) * 64;
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A copy of the TF2 fixture with optimizer slots (the source must never change).
fn source(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for f in ["ckpt-1.index", "ckpt-1.data-00000-of-00001"] {
        std::fs::copy(fixtures().join("tf2_slots").join(f), src.join(f)).unwrap();
    }
    src.join("ckpt-1")
}

fn sh(cmd: &str, args: &[&Path]) -> std::process::Output {
    Command::new(cmd).args(args).output().expect(cmd)
}

fn ok(cmd: &str, args: &[&Path]) {
    let o = sh(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The keys of `tensors.tsv`.
fn tsv_keys(mnt: &Path) -> Vec<String> {
    std::fs::read_to_string(mnt.join("tensors.tsv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect()
}

fn edits(target: &Path) -> Vec<String> {
    let out = tfmount_ok(&["edits".as_ref(), target.as_os_str()]);
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Writes `bytes` to `path` (created or truncated) and syncs it: the sync's error is the
/// close's (the check of what was written).
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn sha(p: &Path) -> String {
    common::sha256_hex(&std::fs::read(p).unwrap())
}

const K: &str = "net/kernel/.ATTRIBUTES/VARIABLE_VALUE";
const B: &str = "net/bias/.ATTRIBUTES/VARIABLE_VALUE";

#[test]
fn unix_tools_edit_the_checkpoint_and_every_view_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    let before: Vec<String> = ["ckpt-1.index", "ckpt-1.data-00000-of-00001"]
        .iter()
        .map(|f| sha(&src.with_file_name(f)))
        .collect();
    let edits_dir = dir.path().join("edits");
    let opt = format!("edit={}", edits_dir.display());
    let mut m = Mount::start(&src, &["-o", &opt]);
    let mnt = m.path();
    let v = mnt.join("variables");
    let kernel_before = std::fs::read(v.join(format!("{K}.bin"))).unwrap();

    // rm -r of the optimizer's variables; rm of one file drops a tensor (all four files).
    ok("rm", &["-r".as_ref(), &v.join("opt")]);
    ok(
        "rm",
        &[&v.join("odd..name.Sx/.ATTRIBUTES/VARIABLE_VALUE.shape")],
    );
    assert!(
        !listing(&v).contains(&"opt".to_string()),
        "{:?}",
        listing(&v)
    );
    assert!(!listing(&v).contains(&"odd..name.Sx".to_string()));
    // mv of a directory renames every key under it; mv of a file renames one tensor.
    ok("mv", &[&v.join("net"), &v.join("model")]);
    // A rename the TF2 object graph cannot follow (a key's tail, not its object's path) is
    // refused at the rename, in words in the log; a move of the object is done.
    let refused = sh(
        "mv",
        &[
            &v.join("step/.ATTRIBUTES/VARIABLE_VALUE.npy"),
            &v.join("step/.ATTRIBUTES/counter.npy"),
        ],
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Operation not permitted"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        m.log_text().contains("object graph cannot follow"),
        "{}",
        m.log_text()
    );
    std::fs::create_dir_all(v.join("counter/.ATTRIBUTES")).unwrap();
    ok(
        "mv",
        &[
            &v.join("step/.ATTRIBUTES/VARIABLE_VALUE.npy"),
            &v.join("counter/.ATTRIBUTES/VARIABLE_VALUE.npy"),
        ],
    );
    // A renamed file keeps its values.
    let mk = "model/kernel/.ATTRIBUTES/VARIABLE_VALUE".to_string();
    assert_eq!(
        std::fs::read(v.join(format!("{mk}.bin"))).unwrap(),
        kernel_before
    );
    // cp of an .npy to a new name adds a tensor.
    let x = dir.path().join("x.npy");
    std::fs::write(&x, npy_f32(&[2, 3], &[1., 2., 3., 4., 5., 6.])).unwrap();
    std::fs::create_dir(v.join("extra")).unwrap();
    ok("cp", &[&x, &v.join("extra/x.npy")]);
    assert_eq!(
        f32s(&std::fs::read(v.join("extra/x.bin")).unwrap()),
        [1., 2., 3., 4., 5., 6.]
    );
    assert_eq!(
        std::fs::read_to_string(v.join("extra/x.shape")).unwrap(),
        "2 3\n"
    );
    assert_eq!(
        std::fs::read_to_string(v.join("extra/x.dtype")).unwrap(),
        "float32\n"
    );
    // A large one (written in 1 MiB requests, put into the edits directory behind them):
    // byte for byte.
    let big: Vec<f32> = (0..(3 << 18)).map(|i| i as f32).collect();
    let bx = dir.path().join("big.npy");
    std::fs::write(&bx, npy_f32(&[big.len() as u64], &big)).unwrap();
    ok("cp", &[&bx, &v.join("extra/big.npy")]);
    assert_eq!(
        std::fs::read(v.join("extra/big.npy")).unwrap(),
        std::fs::read(&bx).unwrap()
    );
    ok("rm", &[&v.join("extra/big.npy")]);
    // A write to a temporary name renamed into place (an editor, an atomic writer) gives an
    // existing tensor new values, of another shape.
    let tmp = v.join("model/kernel/.ATTRIBUTES/.VARIABLE_VALUE.npy.tmp");
    std::fs::write(&tmp, npy_f32(&[2], &[7., 8.])).unwrap();
    std::fs::rename(&tmp, v.join(format!("{mk}.npy"))).unwrap();
    assert_eq!(
        f32s(&std::fs::read(v.join(format!("{mk}.bin"))).unwrap()),
        [7., 8.]
    );
    assert_eq!(
        std::fs::read_to_string(v.join(format!("{mk}.shape"))).unwrap(),
        "2\n"
    );
    // A .bin of the tensor's size takes new values of the same dtype and shape.
    let mb = v.join("model/bias/.ATTRIBUTES/VARIABLE_VALUE.bin");
    let four: Vec<u8> = [9f32, 9., 9., 9.]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    write_synced(&mb, &four).unwrap();
    assert_eq!(std::fs::read(&mb).unwrap(), four);
    // A .bin opened without O_TRUNC starts as the tensor's bytes: a write patches them.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&mb).unwrap();
        f.write_all_at(&1.5f32.to_le_bytes(), 4).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(f32s(&std::fs::read(&mb).unwrap()), [9., 1.5, 9., 9.]);
    let four: Vec<u8> = [9f32, 1.5, 9., 9.]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    // What is not a whole .npy (or a .bin of the tensor's size) leaves the tensor as it was,
    // and the close (here the sync) fails with EINVAL.
    let counter = v.join("counter/.ATTRIBUTES/VARIABLE_VALUE.npy");
    let counter_before = std::fs::read(&counter).unwrap();
    let good = npy_f32(&[3], &[1., 2., 3.]);
    for (what, bytes) in [
        ("a partial write", &good[..good.len() - 5]),
        ("garbage", &b"not an npy file at all, just bytes"[..]),
        ("nothing", &b""[..]),
    ] {
        let e = write_synced(&counter, bytes).expect_err(what);
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{what}: {e}");
        assert_eq!(std::fs::read(&counter).unwrap(), counter_before, "{what}");
    }
    let e = write_synced(&mb, &four[..3]).expect_err("a .bin of 3 bytes");
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");
    assert_eq!(std::fs::read(&mb).unwrap(), four);
    // One open that writes, cuts the file to 0 and writes a whole .npy: the last is kept.
    let kn = v.join(format!("{mk}.npy"));
    {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&kn)
            .unwrap();
        f.write_all(b"half a thought").unwrap();
        f.set_len(0).unwrap();
        use std::io::Seek;
        f.rewind().unwrap();
        f.write_all(&npy_f32(&[2], &[5., 6.])).unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(
        f32s(&std::fs::read(v.join(format!("{mk}.bin"))).unwrap()),
        [5., 6.]
    );
    write_synced(&kn, &npy_f32(&[2], &[7., 8.])).unwrap();
    // truncate(1): open, ftruncate, close: refused at the close.
    let t = sh("truncate", &["-s".as_ref(), "0".as_ref(), &counter]);
    assert!(!t.status.success(), "truncate of a tensor's .npy succeeded");
    assert_eq!(std::fs::read(&counter).unwrap(), counter_before);
    // The derived files and the other views are never written.
    let e = std::fs::write(v.join(format!("{mk}.shape")), b"3\n").unwrap_err();
    assert!(
        matches!(
            e.raw_os_error(),
            Some(libc::EPERM | libc::EACCES | libc::EROFS)
        ),
        "{e}"
    );
    let e = std::fs::write(mnt.join("tensors.tsv"), b"x").unwrap_err();
    assert!(
        matches!(
            e.raw_os_error(),
            Some(libc::EACCES | libc::EROFS | libc::EPERM)
        ),
        "{e}"
    );

    // Every view shows the edited model.
    let keys = tsv_keys(&mnt);
    assert_eq!(
        keys,
        [
            "_CHECKPOINTABLE_OBJECT_GRAPH",
            "counter/.ATTRIBUTES/VARIABLE_VALUE",
            "extra/x",
            "model/bias/.ATTRIBUTES/VARIABLE_VALUE",
            "model/bias/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
            "model/bias/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE",
            "model/kernel/.ATTRIBUTES/VARIABLE_VALUE",
            "model/kernel/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
            "model/kernel/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE",
        ]
    );
    let shown: Vec<f32> = std::fs::read_to_string(mnt.join("text/extra/x.txt"))
        .unwrap()
        .split_whitespace()
        .map(|t| t.parse().unwrap())
        .collect();
    assert_eq!(shown, [1., 2., 3., 4., 5., 6.]);
    let summary = std::fs::read_to_string(mnt.join("summary.txt")).unwrap();
    assert!(
        summary.contains(&format!("tensors: {}\n", keys.len())),
        "{summary}"
    );
    // Its scope table: a row per top-level scope, its tensor count second.
    let scope = |name: &str| {
        summary
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|w| w.first() == Some(&name))
            .and_then(|w| w.get(1).map(|n| n.to_string()))
    };
    assert_eq!(scope("extra").as_deref(), Some("1"), "{summary}");
    assert_eq!(scope("counter").as_deref(), Some("1"), "{summary}");
    for gone in ["net", "opt", "step", "odd..name.Sx"] {
        assert_eq!(scope(gone), None, "{gone}: {summary}");
    }
    let st = std::fs::read(mnt.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let header = String::from_utf8_lossy(&st[8..8 + n]).into_owned();
    assert!(
        header.contains("\"extra/x\"") && !header.contains("opt/beta1_power"),
        "{header}"
    );

    // names/ follows: a renamed tensor's names link to its new key, a dropped one's are gone.
    assert_eq!(
        std::fs::read_link(mnt.join("names/kernel.bin")).unwrap(),
        Path::new("../variables/model/kernel/.ATTRIBUTES/VARIABLE_VALUE.bin")
    );
    assert_eq!(
        f32s(&std::fs::read(mnt.join("names/kernel.bin")).unwrap()),
        [7., 8.]
    );
    assert!(std::fs::symlink_metadata(mnt.join("names/beta1_power.bin")).is_err());

    // `tfmount edits` lists exactly what was done, tensor by tensor.
    let want = [
        "R net/bias/.ATTRIBUTES/VARIABLE_VALUE -> model/bias/.ATTRIBUTES/VARIABLE_VALUE",
        "R net/bias/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE -> model/bias/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
        "R net/bias/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE -> model/bias/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE",
        "R net/kernel/.ATTRIBUTES/VARIABLE_VALUE -> model/kernel/.ATTRIBUTES/VARIABLE_VALUE",
        "R net/kernel/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE -> model/kernel/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
        "R net/kernel/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE -> model/kernel/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE",
        "D odd..name.Sx/.ATTRIBUTES/VARIABLE_VALUE",
        "D opt/beta1_power/.ATTRIBUTES/VARIABLE_VALUE",
        "D opt/beta2_power/.ATTRIBUTES/VARIABLE_VALUE",
        "R step/.ATTRIBUTES/VARIABLE_VALUE -> counter/.ATTRIBUTES/VARIABLE_VALUE",
        "S extra/x (shape [2, 3] float32)",
        "S model/bias/.ATTRIBUTES/VARIABLE_VALUE (shape [4] float32)",
        "S model/kernel/.ATTRIBUTES/VARIABLE_VALUE (shape [2] float32)",
    ];
    assert_eq!(edits(&mnt), want);
    // The same from the edits directory, and after a remount with it.
    assert_eq!(edits(&edits_dir), want);
    let listed = listing(&v);
    m.unmount();
    let m2 = Mount::start(&src, &["-o", &opt]);
    assert_eq!(listing(&m2.path().join("variables")), listed);
    assert_eq!(tsv_keys(&m2.path()), keys);
    assert_eq!(edits(&m2.path()), want);
    // SOURCE was never written.
    let after: Vec<String> = ["ckpt-1.index", "ckpt-1.data-00000-of-00001"]
        .iter()
        .map(|f| sha(&src.with_file_name(f)))
        .collect();
    assert_eq!(before, after);
    // Discarding some edits on the mount: the daemon does it, at once.
    let o = tfmount(&[
        "edits".as_ref(),
        "--discard".as_ref(),
        m2.path().as_os_str(),
        "extra/x".as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!tsv_keys(&m2.path()).contains(&"extra/x".to_string()));
    assert_eq!(edits(&m2.path()).len(), want.len() - 1);
}

/// 4 readers of a tensor's `.npy` while 200 edits give it new values: each whole read is one
/// of the values written, never a mix.
#[test]
fn readers_during_edits_see_old_or_new_values_whole() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    let opt = format!("edit={}", dir.path().join("edits").display());
    let m = Mount::start(&src, &["-o", &opt]);
    let target = m.path().join("variables/rw/x.npy");
    std::fs::create_dir(target.parent().unwrap()).unwrap();
    let n = 16 << 10;
    let value = |i: usize| npy_f32(&[n as u64], &vec![i as f32; n]);
    write_synced(&target, &value(0)).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (t, stop) = (target.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let b = std::fs::read(&t).expect("read");
                    let v = f32s(&b[128..]);
                    assert_eq!(v.len(), n, "a read of {} bytes", b.len());
                    assert!(v.iter().all(|x| *x == v[0]), "a mix of values in one read");
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for i in 1..=200 {
        write_synced(&target, &value(i)).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(reads >= 4, "{reads} reads");
    assert_eq!(f32s(&std::fs::read(&target).unwrap()[128..])[0], 200.0);
}

/// The daemon SIGKILLed in the middle of a `cp` over a tensor: a remount with the same DIR
/// shows the tensor unchanged or replaced whole, and `tfmount edits` agrees.
#[test]
fn a_daemon_killed_in_the_middle_of_a_cp_leaves_the_tensor_whole() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path());
    let edits_dir = dir.path().join("edits");
    let opt = format!("edit={}", edits_dir.display());
    let mut m = Mount::start(&src, &["-o", &opt]);
    let v = m.path().join("variables");
    let original = std::fs::read(v.join(format!("{K}.npy"))).unwrap();
    let n = 32usize << 20;
    let big = dir.path().join("big.npy");
    std::fs::write(&big, npy_f32(&[n as u64], &vec![3.0; n])).unwrap();
    let mut cp = Command::new("cp")
        .arg(&big)
        .arg(v.join(format!("{K}.npy")))
        .spawn()
        .unwrap();
    // Killed once some of it was written (a temporary file in DIR/tensors/ is growing).
    let t0 = Instant::now();
    loop {
        let written: u64 = std::fs::read_dir(edits_dir.join("tensors"))
            .map(|rd| {
                rd.flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        if written > 1 << 20 || t0.elapsed() > Duration::from_secs(20) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    unsafe { libc::kill(m.pid() as i32, libc::SIGKILL) };
    let _ = cp.wait();
    if let Some(mut c) = m.child.take() {
        let _ = c.wait();
    }
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg("-z")
        .arg(m.path())
        .status();
    let m2 = Mount::start(&src, &["-o", &opt]);
    let now = std::fs::read(m2.path().join(format!("variables/{K}.npy"))).unwrap();
    let listed = edits(&edits_dir);
    if now == original {
        assert!(
            listed.iter().all(|l| !l.contains("net/kernel")),
            "{listed:?}"
        );
    } else {
        assert_eq!(now.len(), 128 + 4 * n, "a tensor neither old nor new");
        assert!(f32s(&now[128..]).iter().all(|x| *x == 3.0));
        assert_eq!(listed, [format!("S {K} (shape [{n}] float32)")]);
    }
    // Nothing a crash left behind in DIR: only values files a record names.
    for e in std::fs::read_dir(edits_dir.join("tensors"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with('.'), "a temporary left: {name}");
    }
    let _ = B;
}

/// `rm -r` of the optimizer and `mv` of a sub-module through the mount, then `tfmount commit`:
/// TensorFlow restores the result into the renamed structure (tf.train.Checkpoint, every
/// object matched, the values equal).
#[test]
fn a_commit_is_restored_by_tensorflow_into_the_renamed_structure() {
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train/ckpt");
    let values = dir.path().join("values.json");
    std::fs::create_dir_all(train.parent().unwrap()).unwrap();
    let script = |args: &[&std::ffi::OsStr]| common::export_check("tensorflow, numpy", args);
    if script(&["write".as_ref(), train.as_os_str(), values.as_os_str()]).is_none() {
        return;
    }
    let opt = format!("edit={}", dir.path().join("edits").display());
    let mut m = Mount::start(&train, &["-o", &opt]);
    let v = m.path().join("variables");
    ok("rm", &["-r".as_ref(), &v.join("optimizer")]);
    ok("mv", &[&v.join("model/enc"), &v.join("model/encoder")]);
    let out = dir.path().join("out/ckpt");
    let o = tfmount(&["commit".as_ref(), m.path().as_os_str(), out.as_os_str()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let plan = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(plan.contains("D optimizer/"), "{plan}");
    assert!(
        plan.contains("R model/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE -> model/encoder/kernel/.ATTRIBUTES/VARIABLE_VALUE"),
        "{plan}"
    );
    m.unmount();
    let got = script(&[
        "check".as_ref(),
        values.as_os_str(),
        out.as_os_str(),
        "encoder".as_ref(),
    ])
    .expect("TensorFlow wrote, so it reads");
    let g = &got[out.to_str().unwrap()];
    assert_eq!(g["equal"], true, "{g}");
    let keys = common::checked_keys(g);
    assert!(
        keys.contains(&"model/encoder/kernel/.ATTRIBUTES/VARIABLE_VALUE"),
        "{keys:?}"
    );
    assert!(
        keys.iter().all(|k| !k.starts_with("optimizer/")),
        "{keys:?}"
    );
}

/// A TF1 checkpoint and a Keras file edited through the mount and committed as TF V2
/// checkpoints: TensorFlow's reader (tf.train.load_checkpoint) lists exactly the edited keys,
/// with the values the mount served (the ones set, the ones kept).
#[test]
fn tf1_and_keras_commits_are_read_by_tensorflow() {
    let dir = tempfile::tempdir().unwrap();
    let read = |prefix: &Path| {
        common::export_check("tensorflow, numpy", &["read".as_ref(), prefix.as_os_str()])
            .map(|v| v[prefix.to_str().unwrap()].clone())
    };
    let w = npy_f32(&[3, 4], &(0..12).map(|i| i as f32).collect::<Vec<_>>());
    let w_sha = common::sha256_hex(&w[128..]);
    for (name, source, edit) in [
        ("tf1", fixtures().join("tf1_adam/model.ckpt-3"), 0),
        ("keras", fixtures().join("keras/model.weights.h5"), 1),
    ] {
        let opt = format!("edit={}", dir.path().join(name).display());
        let mut m = Mount::start(&source, &["-o", &opt]);
        let v = m.path().join("variables");
        let kept = if edit == 0 {
            // The optimizer's slots out, the layer renamed, the kernel given new values.
            for slot in ["Adam", "Adam_1"] {
                ok("rm", &[&v.join(format!("dense/kernel/{slot}.npy"))]);
                ok("rm", &[&v.join(format!("dense/bias/{slot}.npy"))]);
            }
            ok(
                "rm",
                &[&v.join("beta1_power.bin"), &v.join("beta2_power.bin")],
            );
            ok("mv", &[&v.join("dense"), &v.join("head")]);
            std::fs::write(dir.path().join("w.npy"), &w).unwrap();
            ok(
                "cp",
                &[&dir.path().join("w.npy"), &v.join("head/kernel.npy")],
            );
            ["global_step", "head/bias", "head/kernel"]
                .map(String::from)
                .to_vec()
        } else {
            ok(
                "rm",
                &["-r".as_ref(), &v.join("layers/batch_normalization")],
            );
            ok("mv", &[&v.join("layers/conv2d"), &v.join("layers/stem")]);
            let mut keys: Vec<String> = std::fs::read_to_string(m.path().join("tensors.tsv"))
                .unwrap()
                .lines()
                .skip(1)
                .map(|l| l.split('\t').next().unwrap().to_string())
                .collect();
            keys.sort();
            assert!(keys.contains(&"layers/stem/vars/0".to_string()), "{keys:?}");
            keys
        };
        // Each kept tensor's bytes, as the mount serves them.
        let served: Vec<(String, String)> = kept
            .iter()
            .map(|k| (k.clone(), sha(&v.join(format!("{k}.bin")))))
            .collect();
        let out = dir.path().join(format!("{name}-out/ckpt"));
        let o = tfmount(&["commit".as_ref(), m.path().as_os_str(), out.as_os_str()]);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        m.unmount();
        let Some(got) = read(&out) else {
            return;
        };
        let mut keys: Vec<String> = got.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, kept, "{name}: {got}");
        for (k, s) in &served {
            let rec = &got[k.as_str()];
            // TF's Python reader refuses some dtypes (bfloat16 reads, half does not): said.
            if rec[2].as_str().is_some_and(|x| x.starts_with("unreadable")) {
                continue;
            }
            assert_eq!(rec[2].as_str(), Some(s.as_str()), "{name}: {k}: {rec}");
        }
        if edit == 0 {
            assert_eq!(got["head/kernel"][2].as_str(), Some(w_sha.as_str()));
            assert_eq!(got["head/kernel"][1], serde_json::json!([3, 4]));
        }
    }
}
