//! What a listing shows (docs/layout.md, "Listed and reachable"): the derived views (`text/`,
//! `stats/`, `names/`, `dequantized/`, `model.safetensors`, `weights.safetensors`,
//! `dequantized.safetensors`) answer every
//! path as before but are not listed, so whole-tree tools see each tensor's bytes at most twice;
//! `-o views=visible` (or `TFMOUNT_VIEWS=visible`) lists them; `tfmount ls` lists what the mount
//! lists. Through the core for every fixture kind, and through real mounts for the whole-tree
//! tools (`du`-like totals, `diff -rq`).

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use tfmount::fs::{Fs, Kind, Options, ROOT};
use tfmount::parse::dtype::DType;
use tfmount::probe::probe;
use tfmount::testkit::writer::CheckpointWriter;

/// The names of derived views at a checkpoint's root.
const VIEWS: &[&str] = &[
    "text",
    "stats",
    "names",
    "dequantized",
    "dequantized.safetensors",
    "model.safetensors",
    "weights.safetensors",
];

/// The views docs/layout.md names under "Listed and reachable" (its first sentence, between
/// the dashes) are exactly [`VIEWS`]: the page and this test cannot drift apart.
#[test]
fn the_layout_page_names_these_views() {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/layout.md"))
            .expect("docs/layout.md");
    let section = page
        .split_once("### Listed and reachable\n")
        .expect("a Listed and reachable section")
        .1;
    let sentence = section
        .split_once(" — ")
        .and_then(|(_, r)| r.split_once(" — "))
        .expect("the views between dashes")
        .0;
    let named: BTreeSet<String> = sentence
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|n| n.trim_end_matches('/').to_string())
        .collect();
    let want: BTreeSet<String> = VIEWS.iter().map(|v| v.to_string()).collect();
    assert_eq!(named, want, "{sentence}");
}

/// Sources of every format, each with the views its root has.
fn sources() -> Vec<(PathBuf, Vec<&'static str>)> {
    let f = fixtures();
    let common = ["text", "stats", "model.safetensors", "weights.safetensors"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> {
        common.iter().chain(extra).copied().collect()
    };
    vec![
        (f.join("demo_savedmodel"), with(&["names"])),
        (f.join("tf2_keras/ckpt-1"), with(&["names"])),
        (f.join("sharded/model.ckpt"), with(&[])),
        (f.join("keras/model.keras"), with(&["names"])),
        (
            f.join("tflite/dynamic_int8.tflite"),
            with(&["dequantized", "dequantized.safetensors"]),
        ),
        (f.join("tfjs/graph_uint8"), with(&[])),
    ]
}

fn open(src: &Path, visible: bool) -> Fs {
    let probed = probe(src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let opts = Options {
        live: false,
        views_visible: visible,
        ..Options::default()
    };
    Fs::new(&probed, &opts).unwrap_or_else(|e| panic!("{}: {e}", src.display()))
}

fn names_in(fs: &Fs, ino: u64) -> Vec<String> {
    let mut v = Vec::new();
    fs.readdir(ino, 0, |e| {
        if e.name != b"." && e.name != b".." {
            v.push(String::from_utf8_lossy(&e.name).into_owned());
        }
        false
    })
    .expect("readdir");
    v
}

/// The views are not listed at the root, yet each answers lookup as the same node it is when
/// listed (`-o views=visible`), with the same listing inside; everything else is listed alike.
#[test]
fn views_are_reachable_not_listed() {
    for (src, views) in sources() {
        let (hidden, shown) = (open(&src, false), open(&src, true));
        let listed = names_in(&hidden, ROOT);
        let all = names_in(&shown, ROOT);
        let want_views: BTreeSet<String> = views.iter().map(|v| v.to_string()).collect();
        let extra: BTreeSet<String> = all
            .iter()
            .filter(|n| !listed.contains(n))
            .cloned()
            .collect();
        assert_eq!(extra, want_views, "{}: listed {listed:?}", src.display());
        assert!(
            listed.iter().all(|n| !VIEWS.contains(&n.as_str())),
            "{}: {listed:?}",
            src.display()
        );
        assert!(listed.contains(&"variables".to_string()));
        assert!(listed.contains(&"summary.txt".to_string()));
        assert!(listed.contains(&"tensors.tsv".to_string()));
        for v in &views {
            let a = hidden
                .lookup(ROOT, v.as_bytes())
                .expect("a view answers lookup");
            let b = shown.lookup(ROOT, v.as_bytes()).expect("listed");
            assert_eq!((a.kind, a.size), (b.kind, b.size), "{}: {v}", src.display());
            if a.kind == Kind::Dir {
                assert_eq!(
                    names_in(&hidden, a.ino),
                    names_in(&shown, b.ino),
                    "{}: inside {v}",
                    src.display()
                );
                assert!(
                    !names_in(&hidden, a.ino).is_empty(),
                    "{}: {v}",
                    src.display()
                );
            } else {
                let (x, y) = (
                    hidden.read(a.ino, 0, 1 << 20).expect("read"),
                    shown.read(b.ino, 0, 1 << 20).expect("read"),
                );
                assert_eq!(x, y, "{}: {v}", src.display());
            }
        }
        // summary.txt names the views this checkpoint has.
        let s = hidden.lookup(ROOT, b"summary.txt").expect("summary.txt");
        let text = String::from_utf8(hidden.read(s.ino, 0, 1 << 20).expect("read").to_vec())
            .expect("utf-8");
        let tail = text
            .split_once("\nviews (reachable by path, not listed")
            .unwrap_or_else(|| panic!("{}: no views in summary.txt:\n{text}", src.display()))
            .1;
        for v in &views {
            let shown = if hidden.lookup(ROOT, v.as_bytes()).expect("view").kind == Kind::Dir {
                format!("  {v}/")
            } else {
                format!("  {v}")
            };
            assert!(tail.contains(&shown), "{}: {v} in\n{tail}", src.display());
        }
    }
}

/// `tfmount ls` lists what the mount lists (no views, unless TFMOUNT_VIEWS=visible), and lists
/// a view by its path.
#[test]
fn ls_lists_what_the_mount_lists() {
    let src = fixtures().join("demo_savedmodel");
    let src_s = src.to_string_lossy().to_string();
    let ls = |env: Option<&str>, args: &[&str]| -> Vec<String> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tfmount"));
        cmd.arg("ls").arg(&src_s).args(args);
        match env {
            Some(v) => cmd.env("TFMOUNT_VIEWS", v),
            None => cmd.env_remove("TFMOUNT_VIEWS"),
        };
        let out = cmd.output().expect("tfmount ls");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(String::from)
            .collect()
    };
    assert_eq!(ls(None, &[]), names_in(&open(&src, false), ROOT));
    assert_eq!(ls(Some("hidden"), &[]), names_in(&open(&src, false), ROOT));
    assert_eq!(ls(Some("visible"), &[]), names_in(&open(&src, true), ROOT));
    let fs = open(&src, false);
    let text = fs.lookup(ROOT, b"text").expect("text/");
    assert_eq!(ls(None, &["text/"]), names_in(&fs, text.ino));
    // A bad value is said, naming the variable.
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["ls", &src_s])
        .env("TFMOUNT_VIEWS", "some")
        .output()
        .expect("tfmount ls");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("TFMOUNT_VIEWS=\"some\""),
        "{err}"
    );
}

/// Two V2 checkpoints of `n` float32 tensors of `elems` values; the tensors of `changed` differ.
fn two_checkpoints(dir: &Path, n: usize, elems: usize, changed: &[usize]) -> (PathBuf, PathBuf) {
    let mut out = Vec::new();
    for (c, name) in ["a", "b"].iter().enumerate() {
        let prefix = dir.join(name).join("ckpt");
        std::fs::create_dir_all(prefix.parent().expect("dir")).expect("mkdir");
        let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
        for i in 0..n {
            let bump = if c == 1 && changed.contains(&i) {
                0.5
            } else {
                0.0
            };
            let vals: Vec<f32> = (0..elems).map(|e| (i * elems + e) as f32 + bump).collect();
            let key = format!("layer_{i:03}/kernel");
            w.add(
                key.as_bytes(),
                DType(1),
                &[elems as u64],
                &f32_bytes(&vals),
                0,
            )
            .expect("add");
        }
        w.finish().expect("finish");
        out.push(prefix);
    }
    (out[0].clone(), out[1].clone())
}

/// Bytes of every regular file under `root`, walked as `du --apparent-size` and `cp -r` do
/// (listings only, symlinks not followed).
fn walked_bytes(root: &Path) -> (u64, Vec<PathBuf>) {
    let files = walk_files(root);
    let total = files
        .iter()
        .map(|p| std::fs::symlink_metadata(root.join(p)).expect("stat").len())
        .sum();
    (total, files)
}

/// A walk of a mount's root (what `du`, `tar`, `cp -r` and `rsync` read) totals at most twice
/// the tensor bytes plus the small files (`.shape`, `.dtype`, `tensors.tsv`, `summary.txt`,
/// `.npy` headers); no file of a view is walked. With `-o views=visible` the views are walked
/// too (over 4x), which is what hiding them saves.
#[test]
fn a_walk_of_the_mount_sees_the_tensors_at_most_twice() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (n, elems) = (40usize, 16 * 1024usize);
    let (a, _) = two_checkpoints(tmp.path(), n, elems, &[]);
    let tensor_bytes = (n * elems * 4) as u64;
    let m = Mount::start(&a, &[]);
    let (total, files) = walked_bytes(&m.path());
    let small: u64 = files
        .iter()
        .filter(|p| {
            !p.to_string_lossy().ends_with(".bin") && !p.to_string_lossy().ends_with(".npy")
        })
        .map(|p| {
            std::fs::symlink_metadata(m.path().join(p))
                .expect("stat")
                .len()
        })
        .sum();
    for p in &files {
        let first = p.components().next().expect("component");
        let first = first.as_os_str().to_string_lossy();
        assert!(
            !VIEWS.contains(&first.as_ref()),
            "walked into a view: {}",
            p.display()
        );
    }
    let npy_headers = (n * 128) as u64;
    assert!(
        total <= 2 * tensor_bytes + npy_headers + small,
        "walked {total} bytes for {tensor_bytes} bytes of tensors"
    );
    assert!(small < tensor_bytes / 50, "small files {small} bytes");
    assert!(
        (total as f64) / (tensor_bytes as f64) <= 2.05,
        "{total} / {tensor_bytes}"
    );
    // Every view still answers by path.
    let text = std::fs::read(m.path().join("text/layer_000/kernel.txt")).expect("text/ by path");
    let text = String::from_utf8(text).expect("utf-8");
    assert!(
        text.split_whitespace().last() == Some(&(elems - 1).to_string()),
        "the last value of layer_000/kernel"
    );
    let st = std::fs::metadata(m.path().join("model.safetensors")).expect("by path");
    assert!(st.len() > tensor_bytes);
    drop(m);
    let m = Mount::start(&a, &["-o", "views=visible"]);
    let (visible, _) = walked_bytes(&m.path());
    assert!(
        visible > 4 * tensor_bytes,
        "with -o views=visible the walk reads the views: {visible} for {tensor_bytes}"
    );
}

/// `diff -rq` of two mounted checkpoints names exactly the `.bin` and `.npy` of each tensor
/// `tfmount diff` reports changed, and `tensors.tsv` (which records each tensor's CRC-32C, so it
/// differs exactly when a tensor does): no view's copy of the same change.
#[test]
fn diff_rq_names_each_changed_tensor_once_per_file_kind() {
    let tmp = tempfile::tempdir().expect("tmp");
    let changed = [3usize, 17, 31];
    let (a, b) = two_checkpoints(tmp.path(), 40, 256, &changed);
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .output()
        .expect("tfmount diff");
    let reported: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("M\t").map(String::from))
        .collect();
    let want_keys: BTreeSet<String> = changed
        .iter()
        .map(|i| format!("layer_{i:03}/kernel"))
        .collect();
    assert_eq!(reported, want_keys);
    let (ma, mb) = (Mount::start(&a, &[]), Mount::start(&b, &[]));
    let out = Command::new("diff")
        .arg("-rq")
        .arg(ma.path())
        .arg(mb.path())
        .output()
        .expect("diff -rq");
    let text = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("Files {}/", ma.path().display());
    let differ: BTreeSet<String> = text
        .lines()
        .map(|l| {
            l.strip_prefix(&prefix)
                .and_then(|r| r.split_once(" and "))
                .map(|(p, _)| p.to_string())
                .unwrap_or_else(|| panic!("unexpected line: {l}"))
        })
        .collect();
    let mut want: BTreeSet<String> = reported
        .iter()
        .flat_map(|k| [format!("variables/{k}.bin"), format!("variables/{k}.npy")])
        .collect();
    want.insert("tensors.tsv".into());
    assert_eq!(differ, want, "{text}");
}
