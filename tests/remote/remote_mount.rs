//! Sources on object storage, end to end: TensorFlow-written fixtures uploaded to moto (S3) or
//! fake-gcs-server (GCS) on 127.0.0.1, or served by nginx (plain HTTP), mounted as URLs through the kernel and compared
//! file by file with the local mount of the same fixture; an editable mount of an S3 source against the local one,
//! edited alike, and its commit; the subcommands (`ls -R`, `cat`, `diff`) on URLs; a missing
//! bucket and refused credentials fail at mount with one line and exit 3.
//!
//! Needs moto, fake-gcs-server and nginx: `scripts/install-test-servers.sh`.

use crate::common;
use crate::common::servers::{
    gcs_bucket, gcs_key_file, gcs_put, http, s3_env, Server, NGINX_DIRS_404,
};

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{fixtures, same_tree, walk_files, Mount};

/// The fixtures uploaded, each under its own name: a V2 prefix's directory, a SavedModel, a
/// checkpoint directory of V1 checkpoints (state file and `.meta` files).
const UPLOADS: &[&str] = &["sharded", "demo_savedmodel", "v1/single", "cli/pair"];

/// Uploads every file of `fixtures/<dir>` to `bucket/<dir>/...` with a plain S3 PUT.
fn upload(port: u16, bucket: &str, dir: &str) {
    let root = fixtures().join(dir);
    for rel in walk_local(&root) {
        let body = std::fs::read(root.join(&rel)).expect("fixture");
        let key = format!("/{bucket}/{dir}/{}", rel.display());
        let (st, resp) = http(port, "PUT", &key, &[], &body);
        assert_eq!(st, 200, "PUT {key}: {}", String::from_utf8_lossy(&resp));
    }
}

fn walk_local(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        for e in std::fs::read_dir(root.join(&rel)).expect("readdir") {
            let e = e.expect("dirent");
            let p = rel.join(e.file_name());
            if e.file_type().expect("type").is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// moto (S3) on 127.0.0.1 with bucket `tfm` holding `fixtures/<dir>` for each of `dirs`, the home
/// directory its credentials are in, and the environment a tfmount needs to reach it; `None`
/// (the test skipped, said) without moto.
fn moto_with(dirs: &[&str]) -> Option<Moto> {
    let moto = Server::moto(&[])?;
    let home = tempfile::tempdir().expect("home");
    let (st, _) = http(moto.port, "PUT", "/tfm", &[], b"");
    assert_eq!(st, 200, "create bucket: {}", moto.log());
    for d in dirs {
        upload(moto.port, "tfm", d);
    }
    let env = s3_env(moto.port, home.path());
    Some((moto, home, env))
}

/// moto, the home directory of its credentials, the environment that reaches it.
type Moto = (Server, tempfile::TempDir, Vec<(String, String)>);

/// A foreground daemon mounting `url` with `remote_timeout=10s` (tests/common's [`Mount`]: its
/// log, `RUST_LOG=info`, in [`Mount::log_text`]; unmounted when dropped).
fn remote_mount(url: &str, env: &[(String, String)]) -> Mount {
    Mount::start_env(Path::new(url), &["-o", "remote_timeout=10s"], env)
}

#[test]
fn s3_sources_mount_and_serve_what_local_ones_do() {
    let Some((_moto, _home, env)) = moto_with(UPLOADS) else {
        return;
    };
    // A V2 prefix, a SavedModel, a checkpoint directory of V1 checkpoints.
    for (url, local) in [
        (
            "s3://tfm/sharded/model.ckpt",
            fixtures().join("sharded/model.ckpt"),
        ),
        (
            "s3://tfm/demo_savedmodel",
            fixtures().join("demo_savedmodel"),
        ),
        ("s3://tfm/v1/single", fixtures().join("v1/single")),
    ] {
        let r = remote_mount(url, &env);
        let l = Mount::start(&local, &["-o", "nolive"]);
        same_tree(&r.path(), &l.path());
    }
    // The subcommands take URLs too.
    let tfm = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tfmount"))
            .args(args)
            .envs(env.iter().cloned())
            .output()
            .expect("tfmount")
    };
    let ls = tfm(&["ls", "-R", "s3://tfm/sharded/model.ckpt"]);
    let ls_local = tfm(&[
        "ls",
        "-R",
        fixtures()
            .join("sharded/model.ckpt")
            .to_str()
            .expect("path"),
    ]);
    assert!(ls.status.success(), "{ls:?}");
    assert_eq!(ls.stdout, ls_local.stdout);
    let remote_diff = tfm(&[
        "diff",
        "--stats",
        "s3://tfm/cli/pair/a",
        "s3://tfm/cli/pair/b",
    ]);
    let local_diff = tfm(&[
        "diff",
        fixtures().join("cli/pair/a").to_str().expect("a"),
        fixtures().join("cli/pair/b").to_str().expect("b"),
    ]);
    assert_eq!(remote_diff.status.code(), local_diff.status.code());
    assert_eq!(remote_diff.stdout, local_diff.stdout);
}

/// An editable mount of an S3 source (`-o edit=DIR`: the edits live in a local DIR): the same
/// `rm`, `mv` and `cp` as on the local mount of the same checkpoint give the same tree and the
/// same `tfmount edits`, and `tfmount commit` of the S3 mount writes what the local mount shows.
#[test]
fn s3_sources_take_edits_as_local_ones_do() {
    let Some((_moto, _home, env)) = moto_with(&["sharded"]) else {
        return;
    };
    let work = tempfile::tempdir().expect("work");
    let opt = |which: &str| format!("edit={}", work.path().join(which).display());
    let r = Mount::start_env(
        Path::new("s3://tfm/sharded/model.ckpt"),
        &["-o", "remote_timeout=10s", "-o", &opt("remote")],
        &env,
    );
    let l = Mount::start(
        &fixtures().join("sharded/model.ckpt"),
        &["-o", &opt("local")],
    );
    for m in [&r, &l] {
        let v = m.path().join("variables");
        std::fs::remove_file(v.join("counter.npy")).expect("rm counter.npy");
        std::fs::rename(v.join("layer2"), v.join("head")).expect("mv layer2 head");
        std::fs::copy(v.join("layer1/w.npy"), v.join("layer0/w.npy")).expect("cp onto w.npy");
    }
    same_tree(&r.path(), &l.path());
    let edits = |m: &Mount| {
        let o = common::tfmount_env(&["edits".as_ref(), m.path().as_os_str()], &env);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).expect("utf-8")
    };
    let listed = edits(&r);
    assert_eq!(listed, edits(&l));
    for line in [
        "D counter",
        "R layer2/b -> head/b",
        "R layer2/w -> head/w",
        "S layer0/w (shape [4, 3] float32)",
    ] {
        assert!(listed.lines().any(|l| l == line), "{line:?} in {listed}");
    }
    let out = work.path().join("out/model.ckpt");
    let o = common::tfmount_env(
        &["commit".as_ref(), r.path().as_os_str(), out.as_os_str()],
        &env,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = Mount::start(&out, &["-o", "nolive"]);
    same_tree(&c.path().join("variables"), &l.path().join("variables"));
}

/// GCS (fake-gcs-server, reached through a service-account key file as a user would point
/// `GOOGLE_APPLICATION_CREDENTIALS` at one): a V2 prefix and a checkpoint directory of V1
/// checkpoints serve what their local mounts do.
#[test]
fn gcs_sources_mount_and_serve_what_local_ones_do() {
    let Some(gcs) = Server::fake_gcs() else {
        return;
    };
    gcs_bucket(gcs.port, "tfm");
    for d in ["sharded", "v1/single"] {
        let root = fixtures().join(d);
        let files: Vec<(String, Vec<u8>)> = walk_local(&root)
            .into_iter()
            .map(|rel| {
                let body = std::fs::read(root.join(&rel)).expect("fixture");
                (format!("{d}/{}", rel.display()), body)
            })
            .collect();
        gcs_put(gcs.port, "tfm", &files);
    }
    let home = tempfile::tempdir().expect("home");
    let key = gcs_key_file(home.path(), gcs.port);
    let env: Vec<(String, String)> = [
        ("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().expect("key")),
        ("HOME", home.path().to_str().expect("home")),
        ("NO_GCE_CHECK", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (url, local) in [
        (
            "gs://tfm/sharded/model.ckpt",
            fixtures().join("sharded/model.ckpt"),
        ),
        ("gs://tfm/v1/single", fixtures().join("v1/single")),
    ] {
        let r = remote_mount(url, &env);
        let l = Mount::start(&local, &["-o", "nolive"]);
        same_tree(&r.path(), &l.path());
    }
}

/// Plain HTTP cannot list: a prefix's data shards are opened by the names its header implies (a
/// sharded V1 checkpoint's by the names its shard count implies), and a SavedModel's directory
/// is told by its `saved_model.pb`.
/// Copies `fixtures/<d>` for each of `dirs` into the directory nginx serves.
fn serve(nginx: &Server, dirs: &[&str]) {
    for d in dirs {
        let root = fixtures().join(d);
        for rel in walk_local(&root) {
            let to = nginx.root().join(d).join(&rel);
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            std::fs::copy(root.join(&rel), &to).expect("copy");
        }
    }
}

/// The remote mount of `url` at `remote` serves what the local mount at `local` does, but for
/// a SavedModel's assets (plain HTTP cannot list them: not shown).
fn same_tree_but_assets(url: &str, remote: &Path, local: &Path) {
    let passthrough = ["assets", "assets.extra"];
    let files = |root: &Path| -> Vec<PathBuf> {
        walk_files(root)
            .into_iter()
            .filter(|p| !passthrough.iter().any(|d| p.starts_with(d)))
            .collect()
    };
    let rf = files(remote);
    assert_eq!(rf, files(local), "{url}: the same files");
    let tensors = |p: &PathBuf| p.components().any(|c| c.as_os_str() == "variables");
    assert!(rf.iter().any(tensors), "{url}: {rf:?}");
    for p in &rf {
        let a = std::fs::read(remote.join(p)).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let a = common::as_local(p, a);
        assert!(
            a == std::fs::read(local.join(p)).expect("local"),
            "{url}: {}: bytes differ",
            p.display()
        );
    }
    for d in passthrough {
        assert!(!remote.join(d).exists(), "{url}: {d}/ is not shown");
    }
}

/// Plain HTTP cannot list: a prefix's data shards are opened by the names its header implies (a
/// sharded V1 checkpoint's by the names its shard count implies), and a SavedModel's directory
/// is told by its `saved_model.pb`.
#[test]
fn http_sources_mount_and_serve_what_local_ones_do() {
    let Some(nginx) = Server::nginx() else {
        return;
    };
    serve(&nginx, &["sharded", "demo_savedmodel", "v1/sharded"]);
    let base = nginx.url();
    for (url, local) in [
        (
            format!("{base}/sharded/model.ckpt"),
            fixtures().join("sharded/model.ckpt"),
        ),
        (
            format!("{base}/demo_savedmodel"),
            fixtures().join("demo_savedmodel"),
        ),
        // A sharded V1 checkpoint by one of its shards: the others by name.
        (
            format!("{base}/v1/sharded/model.ckpt-00001-of-00003"),
            fixtures().join("v1/sharded/model.ckpt-00001-of-00003"),
        ),
    ] {
        let r = remote_mount(&url, &[]);
        let l = Mount::start(&local, &["-o", "nolive"]);
        same_tree_but_assets(&url, &r.path(), &l.path());
    }
}

/// A web server may answer a directory URL (`/model/`, `/model/assets/`) with 403 (nginx's
/// default without an index: what `Server::nginx` does) or 404 (a server that serves files
/// only): a SavedModel and a checkpoint directory with a state file mount either way, and serve
/// what their local mounts do.
#[test]
fn http_directories_answering_403_or_404_mount() {
    for (directives, status) in [("", 403), (NGINX_DIRS_404, 404)] {
        let Some(nginx) = Server::nginx_with(directives) else {
            return;
        };
        serve(&nginx, &["demo_savedmodel", "v1/sharded"]);
        for dir in [
            "/demo_savedmodel/",
            "/demo_savedmodel/assets/",
            "/v1/sharded/",
        ] {
            let (st, _) = http(nginx.port, "GET", dir, &[], b"");
            assert_eq!(
                st, status,
                "GET {dir}: the server under test answers {status}"
            );
        }
        let base = nginx.url();
        for (url, local) in [
            (
                format!("{base}/demo_savedmodel"),
                fixtures().join("demo_savedmodel"),
            ),
            (
                format!("{base}/demo_savedmodel/"),
                fixtures().join("demo_savedmodel"),
            ),
            (format!("{base}/v1/sharded"), fixtures().join("v1/sharded")),
        ] {
            let r = remote_mount(&url, &[]);
            let l = Mount::start(&local, &["-o", "nolive"]);
            same_tree_but_assets(&url, &r.path(), &l.path());
        }
    }
}

/// The pattern a V1 state file writes for a sharded checkpoint, `model.ckpt-?????-of-00003`,
/// works in a URL as in a local path (its `?` are no query), over HTTP (also spelled `%3F`),
/// S3 and GCS; a real query string is refused, saying so.
#[test]
fn shard_patterns_in_urls_mount_what_the_local_pattern_does() {
    const PATTERN: &str = "v1/sharded/model.ckpt-?????-of-00003";
    let local = fixtures().join(PATTERN);
    let l = Mount::start(&local, &["-o", "nolive"]);
    let Some(nginx) = Server::nginx() else {
        return;
    };
    serve(&nginx, &["v1/sharded"]);
    let base = nginx.url();
    for url in [
        format!("{base}/{PATTERN}"),
        format!("{base}/v1/sharded/model.ckpt-%3F%3F%3F%3F%3F-of-00003"),
    ] {
        let r = remote_mount(&url, &[]);
        same_tree(&r.path(), &l.path());
    }
    // S3.
    let Some((_moto, _home, env)) = moto_with(&["v1/sharded"]) else {
        return;
    };
    let r = remote_mount(&format!("s3://tfm/{PATTERN}"), &env);
    same_tree(&r.path(), &l.path());
    drop(r);
    // GCS.
    let Some((_gcs, _ghome, genv, _)) = gcs_with("v1/sharded") else {
        return;
    };
    let r = remote_mount(&format!("gs://tfm/{PATTERN}"), &genv);
    same_tree(&r.path(), &l.path());
    drop(r);
    // A query string is refused, in one line that says so and how to write a `?`.
    let url = format!("{base}/{PATTERN}?versionId=3");
    let out = common::tfmount(&["ls", &url]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "tfmount ls: {url}: not a usable URL: query strings (`?name=value`) are not \
             supported; a `?` in the path is part of the object name or a shard pattern (write \
             a `?` of an object name as %3F where a `=` follows it)\n"
        )
    );
}

/// Asserts that `tfmount ls`, `cat`, `verify` and a mount of `url` each fail (exit 3) with the
/// one line `<command>: <msg>`.
fn fails_with(url: &str, env: &[(String, String)], msg: &str) {
    let mp = tempfile::tempdir().expect("mount point");
    let mp = mp.path().to_str().expect("path");
    for (args, who) in [
        (vec!["ls", url], "tfmount ls"),
        (vec!["cat", url, "variables/x.bin"], "tfmount cat"),
        (vec!["verify", url], "tfmount verify"),
        (vec!["-o", "remote_timeout=10s", url, mp], "tfmount"),
    ] {
        let t0 = Instant::now();
        let out = common::tfmount_env(&args, env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err, format!("{who}: {msg}\n"), "{args:?}");
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
        assert!(t0.elapsed() < Duration::from_secs(70), "{args:?}: no hang");
    }
}

/// A web server that ignores `Range:` (nginx with `max_ranges 0`, as Python's `http.server`
/// does) cannot serve tfmount: every kind of source says so in words, naming the URL (not
/// "not a TensorFlow checkpoint"), in `ls`, `cat`, `verify` and at mount.
#[test]
fn a_server_without_range_requests_is_named_as_the_problem() {
    let Some(nginx) = Server::nginx_with("max_ranges 0;") else {
        return;
    };
    serve(
        &nginx,
        &["demo_savedmodel", "sharded", "keras", "tflite", "tfjs"],
    );
    let (st, body) = http(
        nginx.port,
        "GET",
        "/tflite/float.tflite",
        &[("Range", "bytes=0-3")],
        b"",
    );
    assert_eq!(st, 200, "the server under test ignores Range");
    assert!(body.len() > 4, "whole file sent");
    let base = nginx.url();
    for (url, named) in [
        ("keras/model.keras", "keras/model.keras"),
        ("tflite/float.tflite", "tflite/float.tflite"),
        ("tfjs/graph/model.json", "tfjs/graph/model.json"),
        ("sharded/model.ckpt", "sharded/model.ckpt.index"),
    ] {
        let url = format!("{base}/{url}");
        let named = format!("{base}/{named}");
        fails_with(&url, &[], &format!("{named}: {RANGE_WORDS}"));
    }
    // A SavedModel: each command names the first of its files it reads.
    let url = format!("{base}/demo_savedmodel");
    let mp = tempfile::tempdir().expect("mount point");
    let mp = mp.path().to_str().expect("path");
    for (args, who) in [
        (vec!["ls", &url], "tfmount ls"),
        (vec!["verify", &url], "tfmount verify"),
        (vec![&url, mp], "tfmount"),
    ] {
        let out = common::tfmount(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        let named = err
            .strip_prefix(&format!("{who}: {url}/"))
            .and_then(|e| e.strip_suffix(&format!(": {RANGE_WORDS}\n")))
            .unwrap_or_else(|| panic!("{args:?}: {err}"));
        assert!(
            ["saved_model.pb", "variables/variables.index"].contains(&named),
            "{args:?}: {err}"
        );
        assert_eq!(out.status.code(), Some(3), "{args:?}: {out:?}");
    }
}

/// What tfmount says of a server that ignores `Range:` (src/source/remote/cause.rs).
const RANGE_WORDS: &str = "the server does not answer HTTP range requests (it sends the whole file when asked for part of it), and tfmount reads files in parts: serve it with a server that does (nginx, any object store) or download it";

/// Messages about remote sources name the full URL and say what is wrong in words: a 404, a
/// refused connection, a missing bucket at mount and in the subcommands; a read that fails
/// in a mount logs one line naming the URL and the tensor.
#[test]
fn remote_errors_name_the_url_and_the_cause() {
    let Some(mut nginx) = Server::nginx() else {
        return;
    };
    serve(&nginx, &["sharded"]);
    let base = nginx.url();
    let url = format!("{base}/nothing/model.ckpt");
    fails_with(
        &url,
        &[],
        &format!("{url}: HTTP 404 Not Found (and so are model.ckpt.index and model.ckpt/)"),
    );
    // A port where nothing listens.
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let url = format!("http://127.0.0.1:{port}/run/model.ckpt");
    fails_with(&url, &[], &format!("{url}: connection refused"));
    // A bucket that does not exist.
    let Some(moto) = Server::moto(&[]) else {
        return;
    };
    let home = tempfile::tempdir().expect("home");
    let env = s3_env(moto.port, home.path());
    let url = "s3://no-such-bucket/run/model.ckpt";
    fails_with(
        url,
        &env,
        &format!("{url}: no such bucket (HTTP 404 Not Found)"),
    );

    // A read that fails in a mount: one log line naming the URL and the tensor.
    let url = format!("{base}/sharded/model.ckpt");
    let r = remote_mount(&url, &[]);
    nginx.stop();
    let e = std::fs::read(r.path().join("variables/layer2/w.npy")).expect_err("the server is gone");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    let text = r.log_text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tensor layer2/w"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    let want = format!(
        "read: {base}/sharded/model.ckpt.data-00002-of-00003: tensor layer2/w: connection refused"
    );
    assert!(lines[0].ends_with(&want), "{}\nwanted: {want}", lines[0]);
    for bad in [
        "NotFound",
        "entity not found",
        "os error",
        "ConnectionRefused",
    ] {
        assert!(!text.contains(bad), "{bad}: {text}");
    }
}

#[test]
fn unusable_s3_sources_fail_at_mount_with_exit_3() {
    let Some(moto) = Server::moto(&[]) else {
        return;
    };
    let home = tempfile::tempdir().expect("home");
    let env = s3_env(moto.port, home.path());
    let dir = tempfile::tempdir().expect("tmp");
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args([
            "-o",
            "remote_timeout=10s",
            "s3://no-such-bucket/x/model.ckpt",
        ])
        .arg(dir.path())
        .envs(env.iter().cloned())
        .output()
        .expect("tfmount");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(t0.elapsed() < Duration::from_secs(20), "no hang");
    // Wrong credentials: moto refuses them when asked to.
    let mut bad = env.clone();
    for (k, v) in &mut bad {
        if k == "AWS_ACCESS_KEY_ID" {
            *v = String::new();
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["ls", "s3://tfm/x"])
        .env_clear()
        .envs(
            bad.iter()
                .filter(|(k, _)| k != "AWS_ACCESS_KEY_ID" && k != "AWS_SECRET_ACCESS_KEY")
                .cloned(),
        )
        .env("AWS_PROFILE", "nonexistent")
        .output()
        .expect("tfmount");
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim().lines().count(),
        1,
        "{out:?}"
    );
}

/// The Keras fixtures mounted from a store: a `.keras` zip (its weights member stored, and
/// deflated), Keras 3 `.weights.h5`, legacy `.h5` (Keras 3's legacy saver and Keras 2), an h5py
/// file with chunked, filtered datasets. `dir` is where `fixtures/keras` was put in the store.
const KERAS_FILES: &[&str] = &[
    "model.keras",
    "model_deflated.keras",
    "model.weights.h5",
    "legacy_model.h5",
    "k2_weights.h5",
    "other_writer.weights.h5",
];

/// Each of [`KERAS_FILES`] under `base` (a URL) serves what its local mount does.
fn keras_files_serve_what_local_ones_do(base: &str, env: &[(String, String)]) {
    for f in KERAS_FILES {
        let url = format!("{base}/{f}");
        let r = remote_mount(&url, env);
        let l = Mount::start(&fixtures().join("keras").join(f), &[]);
        same_tree(&r.path(), &l.path());
    }
}

/// What a daemon counted of its requests to the store (its log line at unmount).
#[derive(Debug, Clone, Copy)]
struct Requests {
    total: u64,
    gets: u64,
    heads: u64,
    lists: u64,
    bytes: u64,
}

/// Mounts `url`, `stat`s `probe` in the mount, unmounts: the requests that cost (the daemon's
/// count, logged at unmount).
fn requests_to_open(url: &str, env: &[(String, String)], probe: &str) -> Requests {
    let mut r = remote_mount(url, env);
    std::fs::metadata(r.path().join(probe)).unwrap_or_else(|e| panic!("{url}: {probe}: {e}"));
    r.unmount();
    let text = r.log_text();
    let line = text
        .lines()
        .rfind(|l| l.contains(": requests "))
        .unwrap_or_else(|| panic!("{url}: no request count logged at unmount: {text}"));
    let num = |after: &str| -> u64 {
        let i = line
            .find(after)
            .unwrap_or_else(|| panic!("{after} in {line}"))
            + after.len();
        line[i..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{after} in {line}"))
    };
    Requests {
        total: num("requests "),
        gets: num("GET "),
        heads: num("HEAD "),
        lists: num("LIST "),
        bytes: num("bytes fetched "),
    }
}

/// Opening a `.keras` and a `.weights.h5` (mount, then `stat` of one tensor's `.shape`) costs a
/// handful of requests: HEADs of the file (and of the `.index` a V2 prefix would have), GETs of
/// its head and tail (the zip's directory, a V1 table's footer) and of the HDF5 metadata (MiB
/// blocks, all of a fixture this small): 10 with 2 GETs when measured; never the whole file
/// twice (it was read three times before detection's opened file was reused by the open).
fn keras_opens_cost_a_handful_of_requests(base: &str, env: &[(String, String)]) {
    for (f, probe) in [
        ("model.keras", "variables/layers/dense/vars/0.shape"),
        ("model.weights.h5", "variables/layers/dense/vars/0.shape"),
    ] {
        let url = format!("{base}/{f}");
        let size = std::fs::metadata(fixtures().join("keras").join(f))
            .expect("fixture")
            .len();
        let r = requests_to_open(&url, env, probe);
        eprintln!("{url}: {r:?} (file: {size} bytes)");
        assert_eq!(r.total, r.gets + r.heads + r.lists, "{url}: {r:?}");
        assert!(r.total <= 12, "{url}: {r:?}");
        assert!(r.gets <= 3, "{url}: {r:?}");
        assert!(
            r.bytes <= 2 * size,
            "{url}: {r:?}, the file is {size} bytes"
        );
    }
}

/// Keras files on S3: each serves what its local mount does, and so does a directory of epoch
/// files (`ModelCheckpoint`'s, mounted as a snapshot); opening one costs a handful of requests.
#[test]
fn keras_files_on_s3_serve_what_local_ones_do() {
    let Some((_moto, _home, env)) = moto_with(&["keras"]) else {
        return;
    };
    keras_files_serve_what_local_ones_do("s3://tfm/keras", &env);
    let r = remote_mount("s3://tfm/keras/checkpoints", &env);
    let l = Mount::start(&fixtures().join("keras/checkpoints"), &["-o", "nolive"]);
    same_tree(&r.path(), &l.path());
    keras_opens_cost_a_handful_of_requests("s3://tfm/keras", &env);
}

/// fake-gcs-server with every file of `fixtures/<dir>` uploaded to `tfm/<dir>/...`: the server,
/// the credentials' home, the daemon's environment for it, the files uploaded (key, bytes).
/// `None` when the server is not installed (the test is skipped, or fails with
/// TFMOUNT_REQUIRE_ALL).
type Gcs = (
    Server,
    tempfile::TempDir,
    Vec<(String, String)>,
    Vec<(String, Vec<u8>)>,
);

fn gcs_with(dir: &str) -> Option<Gcs> {
    let gcs = Server::fake_gcs()?;
    gcs_bucket(gcs.port, "tfm");
    let root = fixtures().join(dir);
    let files: Vec<(String, Vec<u8>)> = walk_local(&root)
        .into_iter()
        .map(|rel| {
            let body = std::fs::read(root.join(&rel)).expect("fixture");
            (format!("{dir}/{}", rel.display()), body)
        })
        .collect();
    gcs_put(gcs.port, "tfm", &files);
    let home = tempfile::tempdir().expect("home");
    let key = gcs_key_file(home.path(), gcs.port);
    let env: Vec<(String, String)> = [
        ("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().expect("key")),
        ("HOME", home.path().to_str().expect("home")),
        ("NO_GCE_CHECK", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Some((gcs, home, env, files))
}

/// Keras files on GCS (fake-gcs-server), as on S3.
#[test]
fn keras_files_on_gcs_serve_what_local_ones_do() {
    let Some((_gcs, _home, env, _)) = gcs_with("keras") else {
        return;
    };
    keras_files_serve_what_local_ones_do("gs://tfm/keras", &env);
    let r = remote_mount("gs://tfm/keras/checkpoints", &env);
    let l = Mount::start(&fixtures().join("keras/checkpoints"), &["-o", "nolive"]);
    same_tree(&r.path(), &l.path());
    keras_opens_cost_a_handful_of_requests("gs://tfm/keras", &env);
}

/// Keras files over plain HTTP (nginx), as on S3 (a directory cannot be listed over HTTP).
#[test]
fn keras_files_over_http_serve_what_local_ones_do() {
    let Some(nginx) = Server::nginx() else {
        return;
    };
    serve(&nginx, &["keras"]);
    let base = format!("{}/keras", nginx.url());
    keras_files_serve_what_local_ones_do(&base, &[]);
    keras_opens_cost_a_handful_of_requests(&base, &[]);
}

/// The TFLite fixtures mounted from a store: buffers inside the flatbuffer and after it,
/// quantized tensors (`dequantized/`), several subgraphs, metadata with a zip of associated files.
const TFLITE_FILES: &[&str] = &[
    "full_int8.tflite",
    "float_offsets.tflite",
    "multi.tflite",
    "with_metadata.tflite",
];

/// Each of [`TFLITE_FILES`] under `base` (a URL) serves what its local mount does; opening one
/// (mount, then `stat` of a tensor's `.shape`) costs a handful of requests: HEADs as each format
/// looks (V2's `.index`, the file itself), and one GET of the file's first block by each format
/// that reads its head (V1's footer, Keras's, TF.js's and TFLite's signatures, tried in that
/// order; a file this small is one block, so 4 times its size): 16 requests with 4 GETs when
/// measured. The model's own open reuses TFLite's detection's file: no further GET.
fn tflite_files_serve_what_local_ones_do(base: &str, env: &[(String, String)]) {
    for f in TFLITE_FILES {
        let url = format!("{base}/{f}");
        let r = remote_mount(&url, env);
        let l = Mount::start(&fixtures().join("tflite").join(f), &[]);
        same_tree(&r.path(), &l.path());
    }
    let url = format!("{base}/full_int8.tflite");
    let size = std::fs::metadata(fixtures().join("tflite/full_int8.tflite"))
        .expect("fixture")
        .len();
    let r = requests_to_open(&url, env, "variables/MatMul.shape");
    eprintln!("{url}: {r:?} (file: {size} bytes)");
    assert_eq!(r.total, r.gets + r.heads + r.lists, "{url}: {r:?}");
    assert!(r.total <= 12 && r.gets <= 2, "{url}: {r:?}");
    assert!(
        r.bytes <= 4 * size,
        "{url}: {r:?}, the file is {size} bytes"
    );
}

/// TFLite models over plain HTTP (nginx).
#[test]
fn tflite_models_over_http_serve_what_local_ones_do() {
    let Some(nginx) = Server::nginx() else {
        return;
    };
    serve(&nginx, &["tflite"]);
    let base = format!("{}/tflite", nginx.url());
    tflite_files_serve_what_local_ones_do(&base, &[]);
}

/// TFLite models on S3, as over HTTP.
#[test]
fn tflite_models_on_s3_serve_what_local_ones_do() {
    let Some((_moto, _home, env)) = moto_with(&["tflite"]) else {
        return;
    };
    tflite_files_serve_what_local_ones_do("s3://tfm/tflite", &env);
}

/// TFLite models on GCS (fake-gcs-server), as over HTTP.
#[test]
fn tflite_models_on_gcs_serve_what_local_ones_do() {
    let Some(gcs) = Server::fake_gcs() else {
        return;
    };
    gcs_bucket(gcs.port, "tfm");
    let root = fixtures().join("tflite");
    let files: Vec<(String, Vec<u8>)> = TFLITE_FILES
        .iter()
        .map(|f| {
            let body = std::fs::read(root.join(f)).expect("fixture");
            (format!("tflite/{f}"), body)
        })
        .collect();
    gcs_put(gcs.port, "tfm", &files);
    let home = tempfile::tempdir().expect("home");
    let key = gcs_key_file(home.path(), gcs.port);
    let env: Vec<(String, String)> = [
        ("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().expect("key")),
        ("HOME", home.path().to_str().expect("home")),
        ("NO_GCE_CHECK", "true"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    tflite_files_serve_what_local_ones_do("gs://tfm/tflite", &env);
}

/// TF.js models over plain HTTP: by the URL of `model.json` and by the URL of its directory
/// (which nginx answers 403 or 404 for), the shards fetched by their paths relative to it; a
/// weight across shards, quantized weights and the graph model's nodes serve what the local
/// mount does.
#[test]
fn tfjs_models_over_http_serve_what_local_ones_do() {
    for (directives, _) in [("", 403), (NGINX_DIRS_404, 404)] {
        let Some(nginx) = Server::nginx_with(directives) else {
            return;
        };
        serve(&nginx, &["tfjs"]);
        let base = nginx.url();
        for (url, local) in [
            ("tfjs/layers_sharded/model.json", "tfjs/layers_sharded"),
            ("tfjs/graph_uint8", "tfjs/graph_uint8"),
            ("tfjs/layers_uint16/", "tfjs/layers_uint16"),
        ] {
            let url = format!("{base}/{url}");
            let r = remote_mount(&url, &[]);
            let l = Mount::start(&fixtures().join(local), &["-o", "nolive"]);
            same_tree_but_assets(&url, &r.path(), &l.path());
        }
    }
}

/// Orbax checkpoints on GCS (where JAX's live): a `CheckpointManager` directory (a snapshot of
/// its steps, `latest` the highest), a Keras `OrbaxCheckpoint` step and the older per-array
/// layout serve what their local mounts do; opening a step and asking one tensor's shape costs a
/// handful of requests and kilobytes, none of the arrays' chunks (docs/orbax.md, "What a mount
/// reads").
#[test]
fn orbax_checkpoints_on_gcs_serve_what_local_ones_do() {
    let Some((_gcs, _home, env, files)) = gcs_with("orbax") else {
        return;
    };
    let root = fixtures().join("orbax");
    for dir in ["manager", "keras/orbax/1", "zarr/ckpt"] {
        let r = remote_mount(&format!("gs://tfm/orbax/{dir}"), &env);
        let l = Mount::start(&root.join(dir), &["-o", "nolive"]);
        same_tree(&r.path(), &l.path());
    }
    let step_bytes: u64 = files
        .iter()
        .filter(|(k, _)| k.starts_with("orbax/manager/10/"))
        .map(|(_, b)| b.len() as u64)
        .sum();
    let r = requests_to_open(
        "gs://tfm/orbax/manager/10",
        &env,
        "variables/default/params/embed/embedding.shape",
    );
    eprintln!("gs://tfm/orbax/manager/10: {r:?} (the step: {step_bytes} bytes)");
    assert_eq!(r.total, r.gets + r.heads + r.lists, "{r:?}");
    // Measured: 10 requests (6 GETs: the tail of what a V2 prefix's index would be, `10.index`,
    // which the first probes ask for at once with the step's HEAD and LIST (a 404, where a HEAD
    // of it was sent before), _CHECKPOINT_METADATA, _METADATA, _sharding, the manifest, the
    // B+tree's one node; HEADs of the step and of the two files opened; 1 LIST), 6.6 KB.
    assert!(r.total <= 12, "{r:?}");
    assert!(r.gets <= 6, "{r:?}");
    assert!(
        r.bytes <= step_bytes / 4,
        "{r:?}: the step is {step_bytes} bytes"
    );
}
