//! Black-box tests of the subcommands `ls`, `cat`, `verify` and `diff`: the built binary is run
//! on the fixtures. `cat` and `ls` are compared with the filesystem core (`Fs`, no kernel);
//! `diff` and `verify` with what TensorFlow's reader says (`tests/fixtures/cli/expected.json`,
//! written by `scripts/gen_cli_fixtures.py`).

use crate::common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{fixtures, json, json_lines, open_fs_ok};
use serde_json::Value;
use tfmount::fs::{Fs, Kind, ROOT};
use tfmount::testkit::requires;

fn cli_dir() -> PathBuf {
    fixtures().join("cli")
}

fn expected() -> Value {
    json(&cli_dir().join("expected.json"))
}

/// `tfmount ARGS` in `dir`, listing the derived views too (`TFMOUNT_VIEWS=visible`), as the
/// core this file compares it with does: so `cat` and `ls` are checked on every file.
fn tfmount_in(dir: &Path, args: &[&OsStr]) -> Output {
    common::tfmount_command()
        .args(args)
        .env("TFMOUNT_VIEWS", "visible")
        .current_dir(dir)
        .output()
        .expect("run tfmount")
}

fn in_fixtures(args: &[&str]) -> Output {
    let a: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    tfmount_in(&fixtures(), &a)
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("exited, not killed by a signal")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The escaping of line-oriented output, written out independently of the program's.
fn esc(raw: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    for &b in raw {
        match b {
            b'\\' => v.extend_from_slice(b"\\\\"),
            b'\t' => v.extend_from_slice(b"\\t"),
            b'\n' => v.extend_from_slice(b"\\n"),
            b => v.push(b),
        }
    }
    v
}

fn unesc(s: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && i + 1 < s.len() {
            v.push(match s[i + 1] {
                b't' => b'\t',
                b'n' => b'\n',
                b'\\' => b'\\',
                other => panic!("unknown escape \\{}", other as char),
            });
            i += 2;
        } else {
            v.push(s[i]);
            i += 1;
        }
    }
    v
}

fn lines(out: &[u8]) -> Vec<Vec<u8>> {
    out.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| l.to_vec())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The reference: the tree as the filesystem core serves it
// ---------------------------------------------------------------------------------------------

/// Every source the fixtures mount: the main manifest, the graph manifest, and the CLI ones
/// (relative to tests/fixtures).
fn all_sources() -> Vec<String> {
    let mut v = Vec::new();
    for m in json(&fixtures().join("manifest.json"))
        .as_array()
        .expect("list")
    {
        v.push(m["source"].as_str().expect("source").to_string());
    }
    for m in json(&fixtures().join("graphs/manifest.json"))
        .as_array()
        .expect("list")
    {
        let s = m["source"].as_str().expect("source");
        let p = Path::new("graphs").join(s);
        // `../tf2_keras/ckpt-1` and the like are already in the main manifest.
        if !s.starts_with("..") {
            v.push(p.to_str().expect("utf-8").to_string());
        }
    }
    for s in [
        "cli/run",
        "cli/run/ckpt-1",
        "cli/unrelated/ckpt-1",
        "cli/pair/a",
        "cli/pair/b",
        "cli/verify/ckpt",
    ] {
        v.push(s.to_string());
    }
    v.sort();
    v.dedup();
    v
}

fn readdir(fs: &Fs, ino: u64) -> Vec<(Vec<u8>, u64, Kind)> {
    let mut v = Vec::new();
    fs.readdir(ino, 0, |e| {
        if e.name != b"." && e.name != b".." {
            v.push((e.name, e.ino, e.kind));
        }
        false
    })
    .expect("readdir");
    v
}

/// A whole file as a mount reads it: open, then reads until its size or an empty read.
fn fs_read(fs: &Fs, ino: u64) -> Result<Vec<u8>, String> {
    let size = fs.open(ino).map_err(|e| e.to_string())?.size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let r = fs
            .read(ino, out.len() as u64, 128 << 10)
            .map_err(|e| e.to_string())?;
        if r.is_empty() {
            break;
        }
        out.extend_from_slice(&r);
    }
    Ok(out)
}

struct Walked {
    /// Every node in pre-order (readdir order), with its path, inode and kind.
    nodes: Vec<(Vec<u8>, u64, Kind)>,
    /// Directories, with their paths (the root is the empty path).
    dirs: Vec<(Vec<u8>, u64)>,
}

fn walk(fs: &Fs) -> Walked {
    fn rec(fs: &Fs, ino: u64, path: &[u8], w: &mut Walked) {
        w.dirs.push((path.to_vec(), ino));
        for (name, child, kind) in readdir(fs, ino) {
            let p = if path.is_empty() {
                name.clone()
            } else {
                [path, b"/", &name].concat()
            };
            w.nodes.push((p.clone(), child, kind));
            if kind == Kind::Dir {
                rec(fs, child, &p, w);
            }
        }
    }
    let mut w = Walked {
        nodes: Vec::new(),
        dirs: Vec::new(),
    };
    rec(fs, ROOT, b"", &mut w);
    w
}

/// Resolves `path` (relative, `/`-separated) through `Fs::lookup`, following symbolic links.
fn fs_resolve(fs: &Fs, path: &[u8], depth: usize) -> Option<u64> {
    assert!(depth < 40, "symlink loop at {}", text(path));
    let mut cur = ROOT;
    let comps: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    for (i, c) in comps.iter().enumerate() {
        let a = fs.lookup(cur, c).ok()?;
        if a.kind == Kind::Symlink {
            let target = fs.readlink(a.ino).ok()?;
            let dir: Vec<&[u8]> = comps[..i].to_vec();
            let mut joined = dir.join(&b'/');
            joined.push(b'/');
            joined.extend_from_slice(&target);
            // Normalise `..` lexically (the targets tfmount makes are relative, in-tree).
            let mut stack: Vec<&[u8]> = Vec::new();
            for part in joined.split(|&b| b == b'/') {
                match part {
                    b"" | b"." => {}
                    b".." => {
                        stack.pop();
                    }
                    p => stack.push(p),
                }
            }
            let mut rest = stack.join(&b'/');
            for more in &comps[i + 1..] {
                rest.push(b'/');
                rest.extend_from_slice(more);
            }
            return fs_resolve(fs, &rest, depth + 1);
        }
        cur = a.ino;
    }
    Some(cur)
}

// ---------------------------------------------------------------------------------------------
// cat
// ---------------------------------------------------------------------------------------------

/// Runs `tfmount cat SOURCE PATHS...` and checks its output is the concatenation of `want`;
/// on a mismatch, finds the first file that differs.
fn check_cat_batch(source: &str, batch: &[(Vec<u8>, Vec<u8>)]) {
    let mut args: Vec<&OsStr> = vec![OsStr::new("cat"), OsStr::new(source)];
    args.extend(batch.iter().map(|(p, _)| OsStr::from_bytes(p)));
    let o = tfmount_in(&fixtures(), &args);
    let want: Vec<u8> = batch.iter().flat_map(|(_, b)| b.iter().copied()).collect();
    assert_eq!(code(&o), 0, "{source}: cat: {}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "{source}: {}", text(&o.stderr));
    if o.stdout != want {
        for (p, b) in batch {
            let one = tfmount_in(
                &fixtures(),
                &[OsStr::new("cat"), OsStr::new(source), OsStr::from_bytes(p)],
            );
            assert_eq!(
                one.stdout.len(),
                b.len(),
                "{source}: cat {}: length",
                text(p)
            );
            assert!(one.stdout == *b, "{source}: cat {}: bytes differ", text(p));
        }
        panic!("{source}: concatenated output differs");
    }
}

#[test]
fn cat_of_every_file_equals_the_core() {
    let mut files_total = 0;
    let mut failing_total = 0;
    for source in all_sources() {
        let fs = open_fs_ok(&fixtures().join(&source));
        let w = walk(&fs);
        let mut ok: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut failing: Vec<Vec<u8>> = Vec::new();
        for (path, ino, kind) in &w.nodes {
            match kind {
                Kind::File => match fs_read(&fs, *ino) {
                    Ok(b) => ok.push((path.clone(), b)),
                    Err(_) => failing.push(path.clone()),
                },
                // A path through each symbolic link (to a file, or to a file in the directory
                // it names) reads the target's bytes.
                Kind::Symlink => {
                    let Some(t) = fs_resolve(&fs, path, 0) else {
                        continue;
                    };
                    let a = fs.getattr(t).expect("getattr");
                    if a.kind == Kind::File {
                        if let Ok(b) = fs_read(&fs, t) {
                            ok.push((path.clone(), b));
                        }
                    } else if a.kind == Kind::Dir {
                        if let Some((name, ino, _)) = readdir(&fs, t)
                            .into_iter()
                            .find(|(_, _, k)| *k == Kind::File)
                        {
                            if let Ok(b) = fs_read(&fs, ino) {
                                ok.push(([path.as_slice(), b"/", &name].concat(), b));
                            }
                        }
                    }
                }
                Kind::Dir => {}
            }
        }
        files_total += ok.len();
        failing_total += failing.len();
        for batch in ok.chunks(400) {
            check_cat_batch(&source, batch);
        }
        // Files a mount answers with EIO: exit 1, nothing on stdout, one line on stderr.
        for p in failing.iter().take(20) {
            let o = tfmount_in(
                &fixtures(),
                &[OsStr::new("cat"), OsStr::new(&source), OsStr::from_bytes(p)],
            );
            assert_eq!(code(&o), 1, "{source}: cat {}", text(p));
            assert!(o.stdout.is_empty());
            assert_eq!(lines(&o.stderr).len(), 1, "{}", text(&o.stderr));
        }
    }
    assert!(files_total > 3000, "only {files_total} files compared");
    eprintln!("{files_total} files compared, {failing_total} failing in the core too");
}

#[test]
fn cat_of_a_damaged_tensor_fails_with_one_line_naming_it() {
    let e = expected();
    let v = variant(&e, "flipped_byte");
    let d = damaged_copy(&v);
    let src = d.path().join("ckpt");
    let good = fixtures().join("cli/verify/ckpt");
    for (path, key) in [
        ("variables/model/dense/kernel.bin", "model/dense/kernel"),
        ("variables/model/dense/kernel.npy", "model/dense/kernel"),
        ("variables/model/emb.bin", "model/emb"),
        ("variables/model/words.bin", "model/words"),
    ] {
        let o = tfmount_in(
            d.path(),
            &[OsStr::new("cat"), src.as_os_str(), OsStr::new(path)],
        );
        assert_eq!(code(&o), 1, "{path}");
        assert!(o.stdout.is_empty(), "{path}: partial output");
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{path}: {err}");
        assert!(err.contains(key), "{path}: {err} does not name {key}");
        assert!(err.contains(&*src.to_string_lossy()), "{path}: {err}");
        // The .shape of a damaged tensor and the clean copy read fine.
        let shape = path.rsplit_once('.').expect("suffix").0.to_string() + ".shape";
        let o = tfmount_in(
            d.path(),
            &[OsStr::new("cat"), src.as_os_str(), OsStr::new(&shape)],
        );
        assert_eq!(code(&o), 0, "{shape}");
        let o = tfmount_in(
            d.path(),
            &[OsStr::new("cat"), good.as_os_str(), OsStr::new(path)],
        );
        assert_eq!(code(&o), 0, "clean {path}");
    }
    // The other paths of one command still come out, the status is 1.
    let o = tfmount_in(
        d.path(),
        &[
            OsStr::new("cat"),
            src.as_os_str(),
            OsStr::new("variables/model/dense/kernel.bin"),
            OsStr::new("variables/model/step.bin"),
        ],
    );
    assert_eq!(code(&o), 1);
    assert_eq!(o.stdout, 1234i64.to_le_bytes());
}

/// Damage is said in words about the user's file, in one line: a data shard cut short (`cat`
/// says what `verify` says, and `diff --exact` names the side it is on), an index cut short,
/// a `.tflite` cut short (the flatbuffer verifier's trace of fields becomes one line).
#[test]
fn damage_is_said_in_words_in_one_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let good = fixtures().join("sharded/model.ckpt");
    for f in std::fs::read_dir(fixtures().join("sharded")).expect("ls") {
        let f = f.expect("entry").path();
        std::fs::copy(&f, tmp.path().join(f.file_name().expect("name"))).expect("copy");
    }
    let cut = tmp.path().join("model.ckpt");
    let shard = tmp.path().join("model.ckpt.data-00001-of-00003");
    let len = std::fs::metadata(&shard).expect("shard").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .expect("open")
        .set_len(len - 4)
        .expect("truncate");
    let cut_s = cut.to_string_lossy().to_string();
    let words = format!(
        "is truncated: {} bytes, the tensor is stored at bytes ",
        len - 4
    );
    let v = in_fixtures(&["verify", &cut_s]);
    assert_eq!(code(&v), 1);
    let reason = text(&v.stdout);
    let (key, reason) = reason.trim_end().split_once('\t').expect("KEY<TAB>REASON");
    assert!(reason.contains(&words), "{reason}");
    let c = in_fixtures(&["cat", &cut_s, &format!("variables/{key}.bin")]);
    let err = text(&c.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&words) && err.contains(key) && !err.contains("bad tensor entry"),
        "{err}"
    );
    let tail = reason.split_once(&words).expect("words").1;
    assert!(
        err.trim_end().ends_with(tail),
        "cat: {err}; verify: {reason}"
    );
    for (a, b, side) in [
        (good.clone(), cut.clone(), "B"),
        (cut.clone(), good.clone(), "A"),
    ] {
        let d = in_fixtures(&[
            "diff",
            "--exact",
            &a.to_string_lossy(),
            &b.to_string_lossy(),
        ]);
        let err = text(&d.stderr);
        assert_eq!(code(&d), 2, "{err}");
        assert!(
            err.starts_with(&format!("tfmount diff: {side} ({cut_s}): {key}: "))
                && err.contains(&words),
            "{err}"
        );
    }
    // An index cut short.
    let index = tmp.path().join("cut.index");
    let bytes = std::fs::read(fixtures().join("sharded/model.ckpt.index")).expect("index");
    std::fs::write(&index, &bytes[..bytes.len() - 20]).expect("write");
    let o = in_fixtures(&["ls", &tmp.path().join("cut").to_string_lossy()]);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 3, "{err}");
    assert!(
        err.contains("not a TensorFlow table (index) file") && !err.contains("magic number\n"),
        "{err}"
    );
    // A .tflite cut short.
    let lite = tmp.path().join("cut.tflite");
    let bytes = std::fs::read(fixtures().join("tflite/float.tflite")).expect("tflite");
    std::fs::write(&lite, &bytes[..3000]).expect("write");
    let o = in_fixtures(&["ls", &lite.to_string_lossy()]);
    let err = text(&o.stderr);
    assert_eq!(code(&o), 3, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("the flatbuffer does not verify: field `")
            && err.contains("truncated or damaged"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// ls
// ---------------------------------------------------------------------------------------------

fn kind_letter(k: Kind) -> &'static [u8] {
    match k {
        Kind::Dir => b"d",
        Kind::File => b"f",
        Kind::Symlink => b"l",
    }
}

fn long_line(fs: &Fs, name: &[u8], ino: u64, kind: Kind) -> Vec<u8> {
    let size = fs.getattr(ino).expect("getattr").size.to_string();
    let mut l = [kind_letter(kind), b"\t", size.as_bytes(), b"\t", &esc(name)].concat();
    if kind == Kind::Symlink {
        l.push(b'\t');
        l.extend_from_slice(&esc(&fs.readlink(ino).expect("readlink")));
    }
    l
}

#[test]
fn ls_matches_the_core_readdir() {
    for source in all_sources() {
        let fs = open_fs_ok(&fixtures().join(&source));
        let w = walk(&fs);
        // Each directory (the first 25 of each source, and the root).
        for (dir, ino) in w.dirs.iter().take(25) {
            let entries = readdir(&fs, *ino);
            let mut args = vec![OsStr::new("ls"), OsStr::new(&source)];
            if !dir.is_empty() {
                args.push(OsStr::from_bytes(dir));
            }
            let o = tfmount_in(&fixtures(), &args);
            assert_eq!(
                code(&o),
                0,
                "{source} ls {}: {}",
                text(dir),
                text(&o.stderr)
            );
            let want: Vec<Vec<u8>> = entries.iter().map(|(n, _, _)| esc(n)).collect();
            assert_eq!(lines(&o.stdout), want, "{source} ls {}", text(dir));
            args.insert(1, OsStr::new("-l"));
            let o = tfmount_in(&fixtures(), &args);
            assert_eq!(code(&o), 0, "{source} ls -l {}", text(dir));
            let want: Vec<Vec<u8>> = entries
                .iter()
                .map(|(n, i, k)| long_line(&fs, n, *i, *k))
                .collect();
            assert_eq!(lines(&o.stdout), want, "{source} ls -l {}", text(dir));
        }
        // ls -R of the root: every path in pre-order.
        let o = in_fixtures(&["ls", "-R", &source]);
        assert_eq!(code(&o), 0, "{source} ls -R");
        let want: Vec<Vec<u8>> = w.nodes.iter().map(|(p, _, _)| esc(p)).collect();
        assert_eq!(lines(&o.stdout), want, "{source} ls -R");
        // ls -lR of a subdirectory: paths relative to it.
        if let Some((dir, _)) = w.dirs.iter().find(|(p, _)| !p.is_empty()) {
            let o = tfmount_in(
                &fixtures(),
                &[
                    OsStr::new("ls"),
                    OsStr::new("-lR"),
                    OsStr::new(&source),
                    OsStr::from_bytes(dir),
                ],
            );
            assert_eq!(code(&o), 0, "{source} ls -lR {}", text(dir));
            let pre = [dir.as_slice(), b"/"].concat();
            let want: Vec<Vec<u8>> = w
                .nodes
                .iter()
                .filter_map(|(p, i, k)| Some(long_line(&fs, p.strip_prefix(&pre[..])?, *i, *k)))
                .collect();
            assert_eq!(lines(&o.stdout), want, "{source} ls -lR {}", text(dir));
        }
    }
}

#[test]
fn ls_follows_symlinks_and_lists_files_as_themselves() {
    let o = in_fixtures(&["ls", "cli/run", "latest/variables/step"]);
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout), ".ATTRIBUTES\n");
    let o = in_fixtures(&["ls", "-l", "cli/run"]);
    assert_eq!(
        text(&o.stdout),
        "d\t0\tckpt-1\nd\t0\tckpt-2\nl\t6\tlatest\tckpt-2\n"
    );
    let o = in_fixtures(&[
        "ls",
        "-l",
        "cli/run",
        "ckpt-1/variables/step/.ATTRIBUTES/VARIABLE_VALUE.bin",
    ]);
    assert_eq!(code(&o), 0);
    assert_eq!(text(&o.stdout), "f\t8\tVARIABLE_VALUE.bin\n");
}

// ---------------------------------------------------------------------------------------------
// diff
// ---------------------------------------------------------------------------------------------

fn diff_lines(e: &Value, with_equal: bool) -> Vec<Vec<u8>> {
    let mut v: Vec<(Vec<u8>, Vec<u8>)> = e["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .map(|l| {
            (
                l[1].as_str().expect("key").as_bytes().to_vec(),
                l[0].as_str().expect("tag").as_bytes().to_vec(),
            )
        })
        .collect();
    if with_equal {
        for k in e["equal"].as_array().expect("equal") {
            v.push((k.as_str().expect("key").as_bytes().to_vec(), b"=".to_vec()));
        }
    }
    v.sort();
    v.into_iter()
        .map(|(k, tag)| [tag.as_slice(), b"\t", &esc(&k)].concat())
        .collect()
}

fn data_bytes_read(stderr: &[u8]) -> u64 {
    let s = text(stderr);
    let i = s.find("data bytes read ").expect("stats line") + "data bytes read ".len();
    s[i..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

#[test]
fn diff_equals_tensorflow() {
    let e = expected();
    let diffs = e["diff"].as_array().expect("diff");
    assert!(diffs.len() >= 6);
    for d in diffs {
        let (a, b) = (d["a"].as_str().expect("a"), d["b"].as_str().expect("b"));
        for (flags, with_equal) in [
            (&[][..], false),
            (&["-s"][..], true),
            (&["--exact"][..], false),
            (&["-s", "--exact", "--stats"][..], true),
        ] {
            let mut args: Vec<&OsStr> = vec![OsStr::new("diff")];
            args.extend(flags.iter().map(OsStr::new));
            args.extend([OsStr::new(a), OsStr::new(b)]);
            let o = tfmount_in(&cli_dir(), &args);
            let want = diff_lines(d, with_equal);
            assert_eq!(
                lines(&o.stdout),
                want,
                "diff {flags:?} {a} {b}: {}",
                text(&o.stderr)
            );
            let differs = !d["lines"].as_array().expect("lines").is_empty();
            assert_eq!(code(&o), i32::from(differs), "diff {flags:?} {a} {b}");
        }
    }
}

#[test]
fn diff_reads_no_data_where_the_index_decides() {
    // One training run: every tensor decided by its stored CRC; nothing read.
    let o = tfmount_in(
        &cli_dir(),
        &[
            OsStr::new("diff"),
            OsStr::new("--stats"),
            OsStr::new("run/ckpt-1"),
            OsStr::new("run/ckpt-2"),
        ],
    );
    assert_eq!(code(&o), 1);
    assert_eq!(data_bytes_read(&o.stderr), 0, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("by bytes 0;"),
        "{}",
        text(&o.stderr)
    );
    // --exact reads both sides of every tensor present in both.
    let o = tfmount_in(
        &cli_dir(),
        &[
            OsStr::new("diff"),
            OsStr::new("--stats"),
            OsStr::new("--exact"),
            OsStr::new("run/ckpt-1"),
            OsStr::new("run/ckpt-2"),
        ],
    );
    assert!(data_bytes_read(&o.stderr) > 0, "{}", text(&o.stderr));
    // The pair: only the differently partitioned tensors (4 of them) are read.
    let o = tfmount_in(
        &cli_dir(),
        &[
            OsStr::new("diff"),
            OsStr::new("--stats"),
            OsStr::new("pair/a"),
            OsStr::new("pair/b"),
        ],
    );
    let s = text(&o.stderr);
    assert!(s.contains("by bytes 4;"), "{s}");
    // 6x4, 4x6, 6x2 and 6x4 float32, both sides, stopping at the first difference at worst.
    let n = data_bytes_read(&o.stderr);
    assert!(n > 0 && n <= 2 * 4 * (24 + 24 + 12 + 24), "{s}");
}

#[test]
fn diff_takes_any_kind_of_checkpoint_source() {
    // A SavedModel, its variables prefix, and the path of its .index are one checkpoint.
    for (a, b) in [
        ("demo_savedmodel", "demo_savedmodel/variables/variables"),
        (
            "demo_savedmodel/saved_model.pb",
            "demo_savedmodel/variables/variables.index",
        ),
        ("tf1_adam", "tf1_adam/model.ckpt-3"),
    ] {
        let o = in_fixtures(&["diff", "-s", a, b]);
        assert_eq!(code(&o), 0, "diff {a} {b}: {}", text(&o.stderr));
        let l = lines(&o.stdout);
        assert!(
            !l.is_empty() && l.iter().all(|l| l.starts_with(b"=\t")),
            "{a} {b}"
        );
    }
    // tf1_adam's latest is model.ckpt-3: against model.ckpt-2 every variable moved.
    let o = in_fixtures(&["diff", "tf1_adam/model.ckpt-2", "tf1_adam"]);
    assert_eq!(code(&o), 1);
    assert!(
        text(&o.stdout).contains("M\tdense/kernel\n"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn diff_exit_status_two_on_trouble() {
    for (a, b) in [
        ("run/ckpt-1", "no/such/ckpt"),
        ("no/such", "run/ckpt-1"),
        ("../graphs/frozen/graph.pb", "run/ckpt-1"),
    ] {
        let o = tfmount_in(
            &cli_dir(),
            &[OsStr::new("diff"), OsStr::new(a), OsStr::new(b)],
        );
        assert_eq!(code(&o), 2, "diff {a} {b}");
        assert!(o.stdout.is_empty());
        assert_eq!(lines(&o.stderr).len(), 1, "{}", text(&o.stderr));
    }
    // A damaged index block is trouble too.
    let e = expected();
    let d = damaged_copy(&variant(&e, "damaged_index_block"));
    let o = tfmount_in(
        d.path(),
        &[
            OsStr::new("diff"),
            fixtures().join("cli/verify/ckpt").as_os_str(),
            OsStr::new("ckpt"),
        ],
    );
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("index block 2/2"),
        "{}",
        text(&o.stderr)
    );
    // Usage errors.
    assert_eq!(code(&in_fixtures(&["diff", "cli/run"])), 2);
}

// ---------------------------------------------------------------------------------------------
// verify
// ---------------------------------------------------------------------------------------------

fn variant(e: &Value, name: &str) -> Value {
    e["verify"]["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("variant {name}"))
        .clone()
}

/// A copy of the clean `cli/verify/ckpt` with the variant's damage applied, in a temporary
/// directory (as `ckpt.*`).
fn damaged_copy(v: &Value) -> tempfile::TempDir {
    damaged_copy_of(&cli_dir().join("verify"), v)
}

/// A copy of the files of `src` with the damage of variant `v` (its `ops`) applied.
fn damaged_copy_of(src: &Path, v: &Value) -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    for f in std::fs::read_dir(src).expect("source dir") {
        let f = f.expect("entry");
        std::fs::copy(f.path(), d.path().join(f.file_name())).expect("copy");
    }
    for op in v["ops"].as_array().expect("ops") {
        let p = d.path().join(op["file"].as_str().expect("file"));
        match op["op"].as_str().expect("op") {
            "flip" => {
                let mut b = std::fs::read(&p).expect("read");
                let at = op["offset"].as_u64().expect("offset") as usize;
                b[at] ^= 0xff;
                std::fs::write(&p, b).expect("write");
            }
            "truncate" => {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .expect("open");
                f.set_len(op["length"].as_u64().expect("length"))
                    .expect("truncate");
            }
            "delete" => std::fs::remove_file(&p).expect("delete"),
            other => panic!("unknown op {other}"),
        }
    }
    d
}

fn tf_fails(v: &Value) -> BTreeSet<Vec<u8>> {
    v["tf_fails"]
        .as_array()
        .expect("tf_fails")
        .iter()
        .map(|k| k.as_str().expect("key").as_bytes().to_vec())
        .collect()
}

/// `(key, reason)` of each line of verify's output.
fn verify_lines(out: &[u8]) -> Vec<(Vec<u8>, String)> {
    lines(out)
        .iter()
        .map(|l| {
            let tabs = l.iter().filter(|&&b| b == b'\t').count();
            assert_eq!(tabs, 1, "not KEY<TAB>REASON: {}", text(l));
            let i = l.iter().position(|&b| b == b'\t').expect("tab");
            (unesc(&l[..i]), text(&l[i + 1..]))
        })
        .collect()
}

#[test]
fn verify_of_clean_sources_is_quiet() {
    for source in all_sources() {
        let Ok(probed) = tfmount::probe::probe(&fixtures().join(&source)) else {
            continue;
        };
        let o = in_fixtures(&["verify", &source]);
        if matches!(probed, tfmount::probe::Probed::Graph { .. }) {
            assert_eq!(code(&o), 3, "verify {source}");
            continue;
        }
        // tf1_adam's state file still lists model.ckpt-1, whose files max_to_keep deleted (the
        // fixture adds that entry on purpose): the one problem, the intact tensors aside.
        if source == "tf1_adam" {
            assert_eq!(code(&o), 1, "verify {source}");
            assert_eq!(
                text(&o.stdout),
                "model.ckpt-1/[checkpoint]\tmissing: tf1_adam/model.ckpt-1.index not found; \
                 listed in tf1_adam/checkpoint\n"
            );
            continue;
        }
        assert_eq!(code(&o), 0, "verify {source}: {}", text(&o.stdout));
        assert!(o.stdout.is_empty(), "verify {source}");
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("verify: ") && err.contains(" 0 problems"),
            "{err}"
        );
    }
    let o = in_fixtures(&["verify", "cli/verify/ckpt"]);
    let err = text(&o.stderr);
    let n = expected()["verify"]["num_keys"].as_u64().expect("num_keys");
    assert!(err.starts_with(&format!("verify: {n} tensors, ")), "{err}");
}

#[test]
fn verify_names_exactly_the_tensors_tensorflow_fails_on() {
    let e = expected();
    for v in e["verify"]["variants"].as_array().expect("variants") {
        let name = v["name"].as_str().expect("name");
        let want = tf_fails(v);
        assert!(!want.is_empty(), "{name}: TensorFlow read everything");
        let d = damaged_copy(v);
        // As a prefix, and as a checkpoint directory (keys prefixed by the checkpoint's name).
        for (source, prefix) in [("ckpt", &b""[..]), (".", &b"ckpt/"[..])] {
            let o = tfmount_in(d.path(), &[OsStr::new("verify"), OsStr::new(source)]);
            assert_eq!(code(&o), 1, "{name} {source}: {}", text(&o.stderr));
            let err = text(&o.stderr);
            assert_eq!(err.lines().count(), 1, "{name}: {err}");
            let mut named = BTreeSet::new();
            for (key, reason) in verify_lines(&o.stdout) {
                let key = key
                    .strip_prefix(prefix)
                    .unwrap_or_else(|| panic!("{name}: {} lacks {prefix:?}", text(&key)))
                    .to_vec();
                if key.starts_with(b"[index block") {
                    // The damaged block, with the keys it holds: exactly TensorFlow's failures.
                    let lo = v["block_keys_after"].as_str().expect("after").as_bytes();
                    let hi = v["block_keys_up_to"].as_str().expect("up to").as_bytes();
                    let tail = format!(
                        "it holds the keys in ({}, {}]",
                        text(&esc(lo)),
                        text(&esc(hi))
                    );
                    assert!(reason.ends_with(&tail), "{name}: {reason}");
                    assert_eq!(
                        text(&key),
                        format!(
                            "[index block {}/2]",
                            v["block"].as_u64().expect("block") + 1
                        )
                    );
                    for k in &want {
                        assert!(
                            lo < k.as_slice() && k.as_slice() <= hi,
                            "{name}: {} outside",
                            text(k)
                        );
                    }
                    named.extend(want.iter().cloned());
                } else {
                    assert!(!reason.is_empty());
                    assert!(named.insert(key.clone()), "{name}: {} twice", text(&key));
                    // The line names the tensor once (as KEY) and the data file at most once.
                    assert!(
                        !reason.contains(&format!("tensor {}", text(&key))),
                        "{name}: {reason}"
                    );
                    assert!(
                        reason
                            .split("; ")
                            .all(|part| part.matches("ckpt.data-0000").count() <= 1),
                        "{name}: {reason}"
                    );
                }
            }
            assert_eq!(
                named.iter().map(|k| text(k)).collect::<Vec<_>>(),
                want.iter().map(|k| text(k)).collect::<Vec<_>>(),
                "{name} {source}"
            );
        }
    }
}

#[test]
fn verify_reasons_name_the_data_file() {
    let e = expected();
    let d = damaged_copy(&variant(&e, "missing_shard"));
    let o = tfmount_in(d.path(), &[OsStr::new("verify"), OsStr::new("ckpt")]);
    for (_, reason) in verify_lines(&o.stdout) {
        assert!(reason.contains("ckpt.data-00001-of-00002"), "{reason}");
        assert!(reason.contains("missing"), "{reason}");
    }
    let d = damaged_copy(&variant(&e, "flipped_byte"));
    let o = tfmount_in(d.path(), &[OsStr::new("verify"), OsStr::new("ckpt")]);
    let l = verify_lines(&o.stdout);
    let (_, r) = l
        .iter()
        .find(|(k, _)| k == b"model/dense/kernel")
        .expect("kernel");
    assert!(
        r.contains("CRC-32C mismatch") && r.contains("ckpt.data-00000-of-00002"),
        "{r}"
    );
    let (_, r) = l.iter().find(|(k, _)| k == b"model/emb").expect("emb");
    assert!(r.starts_with("slice 0,3:0,4: "), "{r}");
}

#[test]
fn verify_exit_status_three_for_unusable_sources() {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::write(d.path().join("x.index"), b"not an sstable").expect("write");
    for src in [
        "no/such/source".to_string(),
        "graphs/frozen/graph.pb".to_string(),
        d.path().join("x").to_string_lossy().into_owned(),
    ] {
        let o = in_fixtures(&["verify", &src]);
        assert_eq!(code(&o), 3, "verify {src}");
        assert!(o.stdout.is_empty());
        assert_eq!(lines(&o.stderr).len(), 1, "{}", text(&o.stderr));
    }
    // In a directory, a checkpoint that cannot be opened is a problem line; the others are
    // verified.
    std::fs::copy(
        fixtures().join("cli/run/ckpt-1.index"),
        d.path().join("good.index"),
    )
    .expect("copy");
    std::fs::copy(
        fixtures().join("cli/run/ckpt-1.data-00000-of-00001"),
        d.path().join("good.data-00000-of-00001"),
    )
    .expect("copy");
    let o = tfmount_in(d.path(), &[OsStr::new("verify"), OsStr::new(".")]);
    assert_eq!(code(&o), 1, "{}", text(&o.stderr));
    let l = verify_lines(&o.stdout);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0].0, b"x/[checkpoint]");
}

// ---------------------------------------------------------------------------------------------
// exit codes, escaping, pipes, the command line
// ---------------------------------------------------------------------------------------------

#[test]
fn ls_and_cat_exit_codes() {
    let cases: &[(&[&str], i32)] = &[
        (&["ls", "cli/run"], 0),
        (&["ls", "cli/run", "no/such/dir"], 1),
        (&["ls", "no/such/source"], 3),
        (&["ls"], 2),
        (&["ls", "-x", "cli/run"], 2),
        (
            &[
                "cat",
                "cli/run",
                "ckpt-1/variables/step/.ATTRIBUTES/VARIABLE_VALUE.shape",
            ],
            0,
        ),
        (&["cat", "cli/run", "ckpt-1/variables"], 1),
        (&["cat", "cli/run", "ckpt-1/nothing.bin"], 1),
        (&["cat", "no/such/source", "x"], 3),
        (&["cat", "cli/run"], 2),
        (&["verify"], 2),
    ];
    for (args, want) in cases {
        let o = in_fixtures(args);
        assert_eq!(code(&o), *want, "tfmount {args:?}: {}", text(&o.stderr));
        if *want != 0 {
            assert!(!o.stderr.is_empty(), "tfmount {args:?}: silent failure");
        }
    }
}

#[test]
fn ls_of_a_damaged_index_fails_where_a_mount_fails() {
    let e = expected();
    let d = damaged_copy(&variant(&e, "damaged_index_block"));
    // Listing `variables` needs the damaged block (as readdir on a mount does: EIO).
    let o = tfmount_in(
        d.path(),
        &[OsStr::new("ls"), OsStr::new("-R"), OsStr::new("ckpt")],
    );
    assert_eq!(code(&o), 1, "{}", text(&o.stderr));
    // The root is listed (its views beside variables/), then entering variables/ fails.
    assert_eq!(
        text(&o.stdout),
        "variables\ntext\nstats\nmodel.safetensors\nweights.safetensors\ntensors.tsv\nsummary.txt\n"
    );
    let err = text(&o.stderr);
    assert!(err.starts_with("tfmount ls: variables: "), "{err}");
    // A directory whose keys all lie in the readable block lists.
    let o = tfmount_in(
        d.path(),
        &[
            OsStr::new("ls"),
            OsStr::new("ckpt"),
            OsStr::new("variables/a_filler/000"),
        ],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    // (A 480-byte component: its first 200 bytes, then a hash; see the README.)
    let out = text(&o.stdout);
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(names.len(), 4, "{out}");
    for (n, suffix) in names.iter().zip([".bin", ".shape", ".dtype", ".npy"]) {
        assert!(
            n.starts_with(&"w".repeat(200)) && n.ends_with(suffix),
            "{n}"
        );
    }
}

#[test]
fn keys_with_tabs_newlines_and_backslashes_are_escaped() {
    let o = in_fixtures(&["ls", "cli/pair/a", "variables/esc"]);
    assert_eq!(
        text(&o.stdout),
        "back\\\\slash.bin\nback\\\\slash.shape\nback\\\\slash.dtype\nback\\\\slash.npy\n\
new\\nline.bin\nnew\\nline.shape\nnew\\nline.dtype\nnew\\nline.npy\n\
tab\\there.bin\ntab\\there.shape\ntab\\there.dtype\ntab\\there.npy\n"
    );
    let o = in_fixtures(&["diff", "cli/pair/a", "cli/pair/b"]);
    let out = text(&o.stdout);
    for l in [
        "M\tesc/back\\\\slash\n",
        "M\tesc/new\\nline\n",
        "M\tesc/tab\\there\n",
    ] {
        assert!(out.contains(l), "{l:?} not in {out:?}");
    }
    // cat takes the raw name (a real tab, newline, backslash in the argument).
    let o = in_fixtures(&["cat", "cli/pair/a", "variables/esc/tab\there.shape"]);
    assert_eq!(text(&o.stdout), "3\n");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    let kernel = "variables/model/dense/kernel.bin";
    let mut cat: Vec<&str> = vec!["cat", "cli/verify/ckpt"];
    cat.extend(std::iter::repeat_n(kernel, 2000)); // 512 KiB, far more than a pipe holds
    for args in [
        cat,
        vec!["ls", "-R", "cli/verify/ckpt"],
        vec!["ls", "-lR", "graphs/tf1_two_tags"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .args(&args)
            .current_dir(fixtures())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        let mut first = [0u8; 10];
        child
            .stdout
            .take()
            .expect("stdout")
            .read_exact(&mut first)
            .expect("10 bytes");
        // The reading end is closed here (as `head -c 10` exits).
        let o = child.wait_with_output().expect("wait");
        assert_eq!(o.status.code(), Some(0), "{:?}: {:?}", &args[..2], o.status);
        assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    }
    // Through a shell, as users write it.
    let o = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -o pipefail; {} cat cli/verify/ckpt {} {} {} | head -c 10 | wc -c",
            env!("CARGO_BIN_EXE_tfmount"),
            kernel,
            kernel,
            "variables/model/head/kernel.bin"
        ))
        .current_dir(fixtures())
        .output()
        .expect("bash");
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), "10");
}

/// `completions` and `manpage` writing into a pipe whose reader is gone (`tfmount completions
/// bash | head -c 1` once head has exited) end as `cat` and `ls` do: status 0, nothing on
/// stderr, where clap_complete's own writer panicked on the EPIPE. The reading end is closed
/// before the command starts, so every write fails.
#[test]
fn completions_and_manpage_into_a_closed_pipe_end_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    for args in [
        vec!["completions", "bash"],
        vec!["completions", "zsh"],
        vec!["manpage"],
    ] {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two new descriptors into `fds`.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just made and nothing else owns them.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(read);
        let o = Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .expect("run tfmount");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(o.stderr.is_empty(), "{args:?}: {}", text(&o.stderr));
    }
}

#[test]
fn the_mount_form_is_unchanged_and_subcommand_names_need_dot_slash() {
    // Both spellings reach the mount code: a missing mount point is exit 4 (no FUSE needed).
    for args in [
        vec!["cli/run", "/nonexistent/mountpoint"],
        vec!["mount", "cli/run", "/nonexistent/mountpoint"],
        vec!["-o", "nocrc", "cli/run", "/nonexistent/mountpoint"],
    ] {
        let o = in_fixtures(&args);
        assert_eq!(code(&o), 4, "tfmount {args:?}: {}", text(&o.stderr));
    }
    // A source named like a subcommand is reached as ./ls: a directory called `ls`.
    let d = tempfile::tempdir().expect("tempdir");
    let ls = d.path().join("ls");
    std::fs::create_dir(&ls).expect("mkdir");
    for f in ["ckpt-1.index", "ckpt-1.data-00000-of-00001"] {
        std::fs::copy(fixtures().join("cli/run").join(f), ls.join(f)).expect("copy");
    }
    let o = tfmount_in(
        d.path(),
        &[OsStr::new("./ls"), OsStr::new("/nonexistent/mountpoint")],
    );
    assert_eq!(code(&o), 4, "{}", text(&o.stderr));
    let o = tfmount_in(d.path(), &[OsStr::new("ls"), OsStr::new("./ls")]);
    assert_eq!(text(&o.stdout), "ckpt-1\n");
    // --help of the mount form names the subcommands and the ./ls rule; each subcommand's
    // --help has an example.
    let o = in_fixtures(&["--help"]);
    let h = text(&o.stdout);
    assert_eq!(code(&o), 0);
    for w in ["verify", "diff", "ls", "cat", "./ls"] {
        assert!(h.contains(w), "--help lacks {w}");
    }
    for sub in ["mount", "ls", "cat", "verify", "diff"] {
        let o = in_fixtures(&[sub, "--help"]);
        assert_eq!(code(&o), 0, "{sub} --help");
        let h = text(&o.stdout);
        assert!(h.contains(&format!("tfmount {sub}")), "{sub} --help: {h}");
        if sub != "mount" {
            assert!(
                h.contains("EXAMPLES") && h.contains("EXIT CODES"),
                "{sub} --help: {h}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// V1 checkpoints (tests/fixtures/v1, tests/fixtures/cli_v1: scripts/gen_cli_v1_fixtures.py)
// ---------------------------------------------------------------------------------------------

fn expected_v1() -> Value {
    json(&fixtures().join("cli_v1/expected.json"))
}

/// `(tensors, bytes)` of verify's summary line.
fn verify_summary(stderr: &[u8]) -> (u64, u64) {
    let s = text(stderr);
    let rest = s
        .strip_prefix("verify: ")
        .unwrap_or_else(|| panic!("no summary: {s}"));
    let mut w = rest.split(' ');
    let tensors = w.next().and_then(|n| n.parse().ok()).expect("tensors");
    assert_eq!(w.next(), Some("tensors,"), "{s}");
    let bytes = w.next().and_then(|n| n.parse().ok()).expect("bytes");
    (tensors, bytes)
}

/// `(number of tensors, their bytes in tfmount's layout)` of a checkpoint, as TensorFlow read it
/// (tests/fixtures/v1/expected/NAME.json).
fn v1_totals(name: &str) -> (u64, u64) {
    let e = json(&fixtures().join(format!("v1/expected/{name}.json")));
    let t = e["tensors"].as_array().expect("tensors");
    let bytes = t
        .iter()
        .map(|t| t["nbytes"].as_u64().expect("nbytes"))
        .sum();
    (t.len() as u64, bytes)
}

#[test]
fn verify_of_clean_v1_sources_is_quiet_and_reads_every_byte() {
    let (s1, s2) = (
        v1_totals("single.model.ckpt-1"),
        v1_totals("single.model.ckpt-2"),
    );
    let keys = expected_v1()["verify"]["keys"].clone();
    let keys = keys.as_array().expect("keys");
    let cli = (
        keys.len() as u64,
        keys.iter().map(|k| k[3].as_u64().expect("nbytes")).sum(),
    );
    let cases: Vec<(&str, (u64, u64))> = vec![
        ("v1/single", (s1.0 + s2.0, s1.1 + s2.1)),
        ("v1/single/model.ckpt-1", s1),
        ("v1/single/model.ckpt-2.meta", s2),
        ("v1/sharded", v1_totals("sharded")),
        ("v1/sharded/model.ckpt-?????-of-00003", v1_totals("sharded")),
        ("v1/sharded/model.ckpt-00002-of-00003", v1_totals("sharded")),
        ("v1/partitioned/model.ckpt", v1_totals("partitioned")),
        ("v1/dtypes/model.ckpt", v1_totals("dtypes")),
        ("v1/large/model.ckpt", v1_totals("large")),
        ("cli_v1/verify/model.ckpt", cli),
        ("cli_v1/verify", cli),
    ];
    for (source, (tensors, bytes)) in cases {
        for threads in ["1", "3"] {
            let o = in_fixtures(&["verify", "--threads", threads, source]);
            assert_eq!(code(&o), 0, "verify {source}: {}", text(&o.stdout));
            assert!(o.stdout.is_empty(), "verify {source}");
            let err = text(&o.stderr);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(" 0 problems"), "{err}");
            assert_eq!(
                verify_summary(&o.stderr),
                (tensors, bytes),
                "{source}: {err}"
            );
        }
    }
    for source in ["cli_v1/pair/v1", "cli_v1/pair/v1/model.ckpt"] {
        let o = in_fixtures(&["verify", source]);
        assert_eq!(code(&o), 0, "verify {source}: {}", text(&o.stdout));
        assert!(o.stdout.is_empty());
    }
}

/// A copy of the variant's `copy` directory with its damage applied.
fn damaged_v1_copy(v: &Value) -> tempfile::TempDir {
    damaged_copy_of(&fixtures().join(v["copy"].as_str().expect("copy")), v)
}

fn str_set(v: &Value) -> BTreeSet<Vec<u8>> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|k| k.as_str().expect("key").as_bytes().to_vec())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn verify_names_exactly_the_v1_tensors_tensorflow_fails_on() {
    let e = expected_v1();
    let variants = e["verify"]["variants"].as_array().expect("variants");
    assert!(variants.len() >= 8);
    for v in variants {
        let name = v["name"].as_str().expect("name");
        let d = damaged_v1_copy(v);
        let tf_fails = str_set(&v["tf_fails"]);
        let lost = str_set(&v["lost_keys"]);
        assert!(!tf_fails.is_empty(), "{name}: TensorFlow read everything");
        let member = format!("{}/", v["checkpoint_name"].as_str().expect("name"));
        for source in v["sources"].as_array().expect("sources") {
            let source = source.as_str().expect("source");
            let o = tfmount_in(d.path(), &[OsStr::new("verify"), OsStr::new(source)]);
            let what = format!("{name}: verify {source}: {}", text(&o.stderr));
            let prefix = if source == "." {
                member.as_bytes()
            } else {
                b""
            };
            if v["tf_open_failed"].as_bool().expect("tf_open_failed") {
                // TensorFlow cannot open the checkpoint: every tensor fails. The source is
                // unusable; in a directory the checkpoint is one failed member, unless the damage
                // left its file no V1 table at all (the footer or the index block lost: probing,
                // by content, no longer finds it, and the state file names nothing that exists).
                let unrecognised = match name {
                    "truncated_file" | "damaged_index_block" => true,
                    "damaged_meta_block" | "sharded_truncated_shard" => false,
                    other => panic!("no expectation for variant {other}"),
                };
                if source == "." && !unrecognised {
                    assert_eq!(code(&o), 1, "{what}");
                    let l = verify_lines(&o.stdout);
                    assert_eq!(l.len(), 1, "{what}");
                    assert_eq!(l[0].0, [prefix, b"[checkpoint]"].concat(), "{what}");
                    assert_eq!(verify_summary(&o.stderr).0, 0, "{what}");
                } else {
                    assert_eq!(code(&o), 3, "{what}");
                    assert!(o.stdout.is_empty(), "{what}");
                    assert_eq!(lines(&o.stderr).len(), 1, "{what}");
                }
                continue;
            }
            assert_eq!(code(&o), 1, "{what}");
            let mut named = BTreeSet::new();
            let mut shards = Vec::new();
            for (key, reason) in verify_lines(&o.stdout) {
                let key = key
                    .strip_prefix(prefix)
                    .unwrap_or_else(|| panic!("{what}: {} lacks the prefix", text(&key)))
                    .to_vec();
                assert!(!reason.is_empty(), "{what}");
                if key.starts_with(b"[shard ") {
                    shards.push((key, reason));
                } else {
                    assert!(named.insert(key.clone()), "{what}: {} twice", text(&key));
                }
            }
            // What TensorFlow fails on: the named tensors, and the tensors stored only in a
            // missing shard (unknown without it: the shard is named instead).
            assert!(named.is_disjoint(&lost), "{what}");
            let all: BTreeSet<Vec<u8>> = named.union(&lost).cloned().collect();
            assert_eq!(
                all.iter().map(|k| text(k)).collect::<Vec<_>>(),
                tf_fails.iter().map(|k| text(k)).collect::<Vec<_>>(),
                "{what}"
            );
            match v["missing_shard"].as_str() {
                Some(file) => {
                    assert_eq!(shards.len(), 1, "{what}");
                    assert_eq!(shards[0].0, b"[shard 2/3]", "{what}");
                    assert!(shards[0].1.contains(file), "{what}");
                    assert!(shards[0].1.contains("missing"), "{what}");
                }
                None => assert!(shards.is_empty(), "{what}"),
            }
            // Every tensor still known was looked at.
            let known = if v["copy"] == "v1/sharded" {
                e["verify"]["sharded_keys"].as_array().expect("keys").len()
            } else {
                e["verify"]["keys"].as_array().expect("keys").len()
            } - lost.len();
            assert_eq!(verify_summary(&o.stderr).0, known as u64, "{what}");
        }
    }
}

#[test]
fn verify_reasons_of_v1_name_the_file_and_the_block_checksum() {
    let e = expected_v1();
    let v = e["verify"]["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["name"] == "damaged_block")
        .expect("damaged_block")
        .clone();
    let d = damaged_v1_copy(&v);
    let o = tfmount_in(d.path(), &[OsStr::new("verify"), OsStr::new("model.ckpt")]);
    let l = verify_lines(&o.stdout);
    assert!(!l.is_empty());
    for (key, reason) in &l {
        assert!(
            reason.starts_with("model.ckpt: block checksum mismatch (stored 0x"),
            "{}: {reason}",
            text(key)
        );
    }
}

#[test]
fn diff_of_v1_checkpoints_equals_tensorflow() {
    let e = expected_v1();
    let diffs = e["diff"].as_array().expect("diff");
    assert!(diffs.len() >= 8);
    for d in diffs {
        let (a, b) = (d["a"].as_str().expect("a"), d["b"].as_str().expect("b"));
        for (flags, with_equal) in [
            (&[][..], false),
            (&["-s"][..], true),
            (&["--exact"][..], false),
            (&["-s", "--stats"][..], true),
        ] {
            let mut args = vec!["diff"];
            args.extend(flags);
            args.extend([a, b]);
            let o = in_fixtures(&args);
            assert_eq!(
                lines(&o.stdout),
                diff_lines(d, with_equal),
                "diff {flags:?} {a} {b}: {}",
                text(&o.stderr)
            );
            let differs = !d["lines"].as_array().expect("lines").is_empty();
            assert_eq!(code(&o), i32::from(differs), "diff {flags:?} {a} {b}");
            if flags.contains(&"--stats") {
                // No stored CRC on a V1 side: every tensor in both is decided by its bytes.
                let s = text(&o.stderr);
                assert!(s.contains("decided by index 0, "), "{a} {b}: {s}");
                let common = d["equal"].as_array().expect("equal").len()
                    + d["lines"]
                        .as_array()
                        .expect("lines")
                        .iter()
                        .filter(|l| l[0] == "M")
                        .count();
                assert!(s.contains(&format!(", by bytes {common};")), "{a} {b}: {s}");
                if common > 0 {
                    assert!(data_bytes_read(&o.stderr) > 0, "{a} {b}: {s}");
                }
            }
        }
    }
}

#[test]
fn diff_of_a_v1_checkpoint_with_a_missing_shard_is_trouble() {
    let e = expected_v1();
    let v = e["verify"]["variants"]
        .as_array()
        .expect("variants")
        .iter()
        .find(|v| v["name"] == "sharded_missing_shard")
        .expect("variant")
        .clone();
    let d = damaged_v1_copy(&v);
    let o = tfmount_in(
        d.path(),
        &[
            OsStr::new("diff"),
            fixtures().join("v1/sharded").as_os_str(),
            OsStr::new("."),
        ],
    );
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("model.ckpt-00001-of-00003 is missing"),
        "{err}"
    );
}

/// `tfmount manpage` renders with `man -l` and names every subcommand and mount option;
/// `tfmount completions bash` is a script bash accepts.
#[test]
fn man_page_renders_and_completions_load() {
    let page = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .arg("manpage")
        .output()
        .expect("tfmount manpage");
    assert!(page.status.success());
    if let Some(man) = requires::program("man", &[], "") {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("tfmount.1");
        std::fs::write(&file, &page.stdout).expect("write");
        let out = Command::new(man)
            .arg("-l")
            .arg(&file)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .expect("man -l");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        for want in [
            "SYNOPSIS",
            "tfmount ls",
            "tfmount verify",
            "remote_timeout",
            "nonempty",
        ] {
            assert!(text.contains(want), "man page lacks {want}:\n{text}");
        }
    }
    let script = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["completions", "bash"])
        .output()
        .expect("tfmount completions");
    assert!(script.status.success());
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("tfmount.bash");
    std::fs::write(&file, &script.stdout).expect("write");
    let out = Command::new("bash")
        .arg("-c")
        .arg("source \"$1\" && complete -p tfmount")
        .arg("bash")
        .arg(&file)
        .output()
        .expect("bash");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("tfmount"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A SavedModel saved without variables still has the views: `tensors.tsv` with its header
/// only, `summary.txt` with totals of 0, an empty `model.safetensors`; `verify` passes.
#[test]
fn saved_model_without_variables_has_empty_views() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::copy(
        fixtures().join("demo_savedmodel/saved_model.pb"),
        dir.path().join("saved_model.pb"),
    )
    .expect("copy");
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .args(args)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let src = dir.path().to_str().expect("utf-8 path");
    let ls = run(&["ls", src]);
    for name in ["variables", "tensors.tsv", "summary.txt"] {
        assert!(ls.lines().any(|l| l == name), "{name} missing:\n{ls}");
    }
    // The views are reachable by path (not listed).
    for name in ["model.safetensors", "weights.safetensors"] {
        assert_eq!(run(&["ls", src, name]), format!("{name}\n"));
    }
    assert_eq!(run(&["ls", src, "variables"]), "");
    assert_eq!(
        run(&["cat", src, "tensors.tsv"]),
        "key\tdtype\tshape\tnbytes\tpath\tcrc32c\tshard\toffset\n"
    );
    let summary = run(&["cat", src, "summary.txt"]);
    assert!(
        summary.starts_with("tensors: 0\nparameters: 0\nbytes: 0 "),
        "{summary}"
    );
    // The header alone, padded to the 4 KiB where the (empty) data starts.
    let st = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["cat", src, "model.safetensors"])
        .output()
        .expect("run")
        .stdout;
    assert_eq!(st.len(), 4096);
    assert_eq!(st[..8], 4088u64.to_le_bytes());
    assert_eq!(
        String::from_utf8_lossy(&st[8..]).trim_end(),
        "{\"__metadata__\":{\"format\":\"tf\"}}"
    );
    run(&["verify", src]);
}

/// A checkpoint directory's state file given as SOURCE stands for the directory.
#[test]
fn state_file_as_source_is_its_directory() {
    let ls = |src: PathBuf| {
        let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .arg("ls")
            .arg("-R")
            .arg(src)
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    };
    let dir = fixtures().join("tf1_adam");
    let listing = ls(dir.clone());
    assert!(String::from_utf8_lossy(&listing).contains("latest"));
    assert_eq!(ls(dir.join("checkpoint")), listing);
}

/// `verify` never passes an incomplete checkpoint directory: a listed checkpoint whose index is
/// deleted, a V1 table truncated to 100 bytes, an index gone beside its data files (no state
/// file). The mount shows what exists.
#[test]
fn verify_reports_checkpoints_a_directory_lacks() {
    let copy = |from: &str| {
        let d = tempfile::tempdir().expect("tmp");
        for e in std::fs::read_dir(fixtures().join(from)).expect("fixture") {
            let p = e.expect("dirent").path();
            std::fs::copy(&p, d.path().join(p.file_name().expect("name"))).expect("copy");
        }
        d
    };
    let verify = |d: &Path| {
        let o = tfmount_in(d, &[OsStr::new("verify"), OsStr::new(".")]);
        (code(&o), verify_lines(&o.stdout))
    };
    // The current checkpoint's index deleted.
    let d = copy("tf1_adam");
    std::fs::remove_file(d.path().join("model.ckpt-3.index")).expect("rm");
    let (c, l) = verify(d.path());
    assert_eq!(c, 1);
    let named: Vec<String> = l.iter().map(|(k, _)| text(k)).collect();
    assert!(
        named.contains(&"model.ckpt-3/[checkpoint]".to_string()),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|(_, r)| r.starts_with("missing: ./model.ckpt-3.index not found")),
        "{l:?}"
    );
    // A V1 checkpoint's table truncated to 100 bytes, in a directory with a state file.
    let d = copy("v1/single");
    let table = d.path().join("model.ckpt-2");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&table)
        .expect("open");
    f.set_len(100).expect("truncate");
    let (c, l) = verify(d.path());
    assert_eq!(c, 1, "{l:?}");
    assert!(
        l.iter()
            .any(|(k, r)| text(k) == "model.ckpt-2/[checkpoint]" && r.starts_with("unreadable: ")),
        "{l:?}"
    );
    // No state file: data files whose index is gone, beside an intact checkpoint.
    let d = copy("sharded");
    for f in ["ckpt.index", "ckpt.data-00000-of-00001"] {
        std::fs::copy(fixtures().join("all_dtypes").join(f), d.path().join(f)).expect("copy");
    }
    std::fs::remove_file(d.path().join("model.ckpt.index")).expect("rm");
    let (c, l) = verify(d.path());
    assert_eq!(c, 1, "{l:?}");
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(text(&l[0].0), "model.ckpt/[checkpoint]");
    assert!(
        l[0].1
            .starts_with("missing: ./model.ckpt.index not found (its data file model.ckpt.data-"),
        "{l:?}"
    );
}

/// `verify DIR` of a copied training directory checks the copy: its state file names the
/// original by an absolute path that still exists, but the directory's own checkpoint of that
/// name comes first (a damaged copy passed as "0 problems"); a state file entry that resolves
/// outside the directory is followed with a warning on stderr.
#[test]
fn verify_of_a_copied_directory_checks_the_copy() {
    use tfmount::parse::dtype::DType;
    use tfmount::testkit::writer::{data_path, CheckpointWriter};
    let tmp = tempfile::tempdir().expect("tmp");
    let train = tmp.path().join("train");
    std::fs::create_dir_all(&train).expect("mkdir");
    let prefix = train.join("ckpt-1");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    let vals: Vec<u8> = (0..4096u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    w.add(b"v", DType(1), &[4096], &vals, 0).expect("add");
    w.finish().expect("finish");
    // As TensorFlow writes it for an absolute save path.
    let state = format!(
        "model_checkpoint_path: \"{p}\"\nall_model_checkpoint_paths: \"{p}\"\n",
        p = prefix.display()
    );
    std::fs::write(train.join("checkpoint"), &state).expect("state");
    let copy = tmp.path().join("copy");
    std::fs::create_dir_all(&copy).expect("mkdir");
    for e in std::fs::read_dir(&train).expect("ls") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), copy.join(e.file_name())).expect("copy");
    }
    let shard = data_path(&copy.join("ckpt-1"), 0, 1);
    let len = std::fs::metadata(&shard).expect("shard").len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .expect("open");
    f.set_len(len / 2).expect("cut");
    let o = tfmount_in(tmp.path(), &[OsStr::new("verify"), copy.as_os_str()]);
    assert_eq!(code(&o), 1, "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        text(&o.stdout).contains("copy/ckpt-1.data-00000-of-00001"),
        "the copy's shard is named: {}",
        text(&o.stdout)
    );
    assert!(!text(&o.stderr).contains("outside"), "{}", text(&o.stderr));
    // A directory whose state file names only a checkpoint elsewhere: followed, and said.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("checkpoint"), &state).expect("state");
    let o = tfmount_in(tmp.path(), &[OsStr::new("verify"), other.as_os_str()]);
    assert_eq!(code(&o), 0, "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        text(&o.stderr).contains("outside") && text(&o.stderr).contains("train/ckpt-1"),
        "{}",
        text(&o.stderr)
    );
}

/// A string field of a JSON record as bytes (its `NAME_hex` when the bytes are not UTF-8).
fn json_bytes(r: &Value, name: &str) -> Vec<u8> {
    if let Some(h) = r.get(format!("{name}_hex")).and_then(Value::as_str) {
        return (0..h.len() / 2)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
    }
    r[name]
        .as_str()
        .unwrap_or_else(|| panic!("{name} in {r}"))
        .as_bytes()
        .to_vec()
}

/// `--json` says what the text says, field by field (docs/cli.md's schema), with the exit
/// status of the text form; `verify` and `diff` end with a summary whose counts are the text's.
#[test]
fn json_output_says_what_the_text_says() {
    // ls: every entry of the whole tree, with its type, size and link target.
    for source in ["demo_savedmodel", "cli/pair/a"] {
        let text_out = in_fixtures(&["ls", "-l", "-R", source]);
        let json_out = in_fixtures(&["ls", "--json", "-R", source]);
        assert_eq!(code(&json_out), code(&text_out), "ls {source}");
        let recs = json_lines(&json_out.stdout);
        let want = lines(&text_out.stdout);
        assert_eq!(recs.len(), want.len(), "ls {source}");
        for (r, l) in recs.iter().zip(&want) {
            let f: Vec<Vec<u8>> = l.split(|&b| b == b'\t').map(unesc).collect();
            let kind = match r["type"].as_str().expect("type") {
                "dir" => "d",
                "file" => "f",
                "symlink" => "l",
                t => panic!("type {t}"),
            };
            assert_eq!(kind.as_bytes(), f[0].as_slice(), "{r}");
            assert_eq!(
                r["size"].as_u64().expect("size").to_string().as_bytes(),
                f[1]
            );
            assert_eq!(json_bytes(r, "path"), f[2], "{r}");
            match f.get(3) {
                Some(t) => assert_eq!(&json_bytes(r, "target"), t, "{r}"),
                None => assert!(r.get("target").is_none(), "{r}"),
            }
        }
    }
    // verify: the problems of a damaged copy, then the summary.
    let e = expected();
    let v = &e["verify"]["variants"][0];
    let d = damaged_copy(v);
    let run = |args: &[&str]| {
        let a: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        tfmount_in(d.path(), &a)
    };
    let (t, j) = (run(&["verify", "ckpt"]), run(&["verify", "--json", "ckpt"]));
    assert_eq!((code(&t), code(&j)), (1, 1));
    let mut recs = json_lines(&j.stdout);
    let summary = recs.pop().expect("a summary");
    assert_eq!(summary["type"], "summary", "{summary}");
    let problems: Vec<(Vec<u8>, String)> = recs
        .iter()
        .map(|r| {
            assert_eq!(r["type"], "problem", "{r}");
            (
                json_bytes(r, "key"),
                r["problem"].as_str().expect("problem").to_string(),
            )
        })
        .collect();
    assert_eq!(problems, verify_lines(&t.stdout));
    let (tensors, bytes) = verify_summary(&t.stderr);
    assert_eq!(summary["tensors"].as_u64(), Some(tensors));
    assert_eq!(summary["bytes"].as_u64(), Some(bytes));
    assert_eq!(summary["problems"].as_u64(), Some(problems.len() as u64));
    assert!(summary["milliseconds"].is_u64(), "{summary}");
    assert_eq!(summary["unchecked"].as_u64(), Some(0), "V2 stores CRC-32Cs");
    // diff: the changes, then the counts --stats prints.
    for d in e["diff"].as_array().expect("diff") {
        let (a, b) = (d["a"].as_str().expect("a"), d["b"].as_str().expect("b"));
        let run = |args: &[&str]| {
            let v: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
            tfmount_in(&cli_dir(), &v)
        };
        let t = run(&["diff", "-s", "--stats", a, b]);
        let j = run(&["diff", "-s", "--json", a, b]);
        assert_eq!(code(&j), code(&t), "diff {a} {b}");
        let mut recs = json_lines(&j.stdout);
        let s = recs.pop().expect("a summary");
        assert_eq!(s["type"], "summary", "{s}");
        let got: Vec<Vec<u8>> = recs
            .iter()
            .map(|r| {
                assert_eq!(r["type"], "change", "{r}");
                [
                    json_bytes(r, "change"),
                    b"\t".to_vec(),
                    esc(&json_bytes(r, "key")),
                ]
                .concat()
            })
            .collect();
        assert_eq!(got, lines(&t.stdout), "diff {a} {b}");
        let count = |tag: &str| got.iter().filter(|l| l.starts_with(tag.as_bytes())).count();
        let stats = text(&t.stderr);
        for (name, tag, words) in [
            ("added", "A\t", "added"),
            ("deleted", "D\t", "deleted"),
            ("type_changed", "T\t", "type"),
            ("modified", "M\t", "modified"),
            ("equal", "=\t", "equal"),
        ] {
            assert_eq!(s[name].as_u64(), Some(count(tag) as u64), "{name}: {s}");
            assert!(
                stats.contains(&format!("{words} {}", count(tag))),
                "{name}: {stats}"
            );
        }
        assert_eq!(
            s["data_bytes_read"].as_u64(),
            Some(data_bytes_read(&t.stderr)),
            "{s}"
        );
    }
}

/// `diff --values` (and `--atol`/`--rtol`) gives numpy's figures on the tensors TensorFlow's
/// reader returns (tests/fixtures/cli/diff_values.json, scripts/gen_diff_values.py): every
/// tensor numpy finds not close is `M` with its max |a-b|, max |a-b|/|b|, RMS, count and first
/// differing index; one with every element close is not (`=` with `-s`).
#[test]
fn diff_values_are_numpys() {
    let e = json(&cli_dir().join("diff_values.json"));
    let mut checked = 0;
    for run in e["runs"].as_array().expect("runs") {
        let (atol, rtol) = (
            run["atol"].as_f64().expect("atol"),
            run["rtol"].as_f64().expect("rtol"),
        );
        let want = run["tensors"].as_object().expect("tensors");
        let (sa, sr) = (atol.to_string(), rtol.to_string());
        let args = [
            "diff", "-s", "--json", "--values", "--atol", &sa, "--rtol", &sr, "pair/a", "pair/b",
        ];
        let a: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        let o = tfmount_in(&cli_dir(), &a);
        assert_eq!(code(&o), 1, "{}", text(&o.stderr));
        let recs = json_lines(&o.stdout);
        for (key, w) in want {
            let r = recs
                .iter()
                .find(|r| r["type"] == "change" && json_bytes(r, "key") == key.as_bytes())
                .unwrap_or_else(|| panic!("atol {atol} rtol {rtol}: {key:?} not listed"));
            let differing = w["differing"].as_u64().expect("differing");
            if differing == 0 {
                assert_eq!(r["change"], "=", "atol {atol} rtol {rtol}: {key:?}: {r}");
                continue;
            }
            assert_eq!(r["change"], "M", "{key:?}: {r}");
            for f in ["max_abs", "max_rel", "rms"] {
                let (g, x) = (r[f].as_f64().expect(f), w[f].as_f64().expect(f));
                assert!(
                    (g - x).abs() <= 1e-12 * x.abs().max(1e-300),
                    "atol {atol} rtol {rtol}: {key:?} {f}: {g} against numpy's {x}"
                );
            }
            for f in ["differing", "elements"] {
                assert_eq!(r[f], w[f], "atol {atol} rtol {rtol}: {key:?} {f}");
            }
            assert_eq!(r["first_index"], w["first_index"], "{key:?}");
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} changed tensors checked");
    // Text: the figures follow the key, in the order the JSON names them.
    let o = tfmount_in(
        &cli_dir(),
        &["diff", "--values", "pair/a", "pair/b"].map(OsStr::new),
    );
    let line = lines(&o.stdout)
        .into_iter()
        .find(|l| l.starts_with(b"M\tchanged/f32\t"))
        .expect("changed/f32");
    let f: Vec<&[u8]> = line.split(|&b| b == b'\t').collect();
    assert_eq!(f.len(), 8, "{}", text(&line));
    assert_eq!((f[5], f[6], f[7]), (&b"1"[..], &b"5"[..], &b"3"[..]));
    // A tolerance that is not a number of 0 or more is a usage error.
    let o = tfmount_in(
        &cli_dir(),
        &["diff", "--atol", "-1", "pair/a", "pair/b"].map(OsStr::new),
    );
    assert_eq!(code(&o), 2, "{}", text(&o.stderr));
}
