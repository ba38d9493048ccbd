//! Remote stores against real servers on 127.0.0.1, started by the tests (src/testkit/
//! servers.rs): moto (S3), fake-gcs-server (GCS), nginx (HTTP). The TensorFlow-written fixture
//! `tests/fixtures/sharded` and a SavedModel are uploaded, and every file read through
//! `RemoteStore` / `RemoteFile` (whole, ranges, suffix, a sequential reader) is compared with the
//! local file. Faults: a server that stops answering or is stopped mid-read (an error within
//! `remote_timeout`, then reads work again), an object rewritten under an open file, wrong
//! credentials, an unknown bucket. `tfmount export` from S3 (a checkpoint to TF and to
//! `.safetensors`, a SavedModel) writes what it writes from the same files on disk.
//!
//! Needs the servers: `scripts/install-test-servers.sh`.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::servers::{gcs_bucket, gcs_key_file, gcs_put, http, s3_env, Server};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tfmount::error::RemoteError;
use tfmount::parse::ReadAt;
use tfmount::source::bytes::{EntryKind, Store};
use tfmount::source::remote::env::Env;
use tfmount::source::remote::{RemoteConfig, RemoteStore};

const TIMEOUT: Duration = Duration::from_secs(5);
const BIG: usize = 20 << 20;

/// The uploaded files: `(key under the upload prefix, local path)`.
fn fixture_files() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for dir in ["sharded", "demo_savedmodel"] {
        let mut stack = vec![common::fixtures().join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(common::fixtures()).unwrap();
                    out.push((rel.to_str().unwrap().to_string(), p));
                }
            }
        }
    }
    out.sort();
    assert!(out.len() >= 8, "{out:?}");
    out
}

/// Deterministic bytes.
fn big_data() -> Vec<u8> {
    tfmount::testkit::rng::bytes(0x9E37_79B9_7F4A_7C15, BIG)
}

fn config(pairs: &[(&str, &str)]) -> RemoteConfig {
    RemoteConfig {
        timeout: TIMEOUT,
        env: Env::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        ..Default::default()
    }
}

fn put_all(os: &Arc<dyn ObjectStore>, files: &[(String, Vec<u8>)]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (k, v) in files {
        rt.block_on(os.put(&Key::from(k.as_str()), PutPayload::from(v.clone())))
            .unwrap_or_else(|e| panic!("upload {k}: {e}"));
    }
}

/// What is uploaded: the fixture files under `up/`, and `up/big.bin`.
fn upload_set() -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fixture_files()
        .into_iter()
        .map(|(k, p)| (format!("up/{k}"), std::fs::read(p).unwrap()))
        .collect();
    v.push(("up/big.bin".into(), big_data()));
    v
}

/// Every fixture file, through the store, equals the local file: whole, ranges, suffix,
/// `read_whole`, a reader.
fn check_fixture_bytes(store: &RemoteStore) {
    for (rel, local_path) in fixture_files() {
        let local = std::fs::read(&local_path).unwrap();
        let key = Path::new("up").join(&rel);
        assert_eq!(store.kind(&key), Some(EntryKind::File), "{rel}");
        let f = store.open(&key).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let n = local.len() as u64;
        assert_eq!(f.len(), n, "{rel}");
        let mut whole = vec![0u8; local.len()];
        f.read_exact_at(&mut whole, 0).unwrap();
        assert!(whole == local, "{rel}: whole file differs");
        for (off, len) in [
            (0, 1),
            (n / 3, n / 3),
            (n.saturating_sub(1), 1),
            (n / 2, n - n / 2),
        ] {
            if len == 0 || off + len > n {
                continue;
            }
            let mut b = vec![0u8; len as usize];
            f.read_exact_at(&mut b, off).unwrap();
            assert!(
                b[..] == local[off as usize..(off + len) as usize],
                "{rel} {off}+{len}"
            );
        }
        assert!(
            f.read_exact_at(&mut [0u8; 2], n.saturating_sub(1)).is_err(),
            "{rel}"
        );
        // Suffix: one GET of the last 48 bytes (the size of an sstable footer).
        let t = store
            .open_tail(&key, 48)
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        let tail = 48.min(n);
        let mut b = vec![0u8; tail as usize];
        t.read_exact_at(&mut b, n - tail).unwrap();
        assert!(
            b[..] == local[(n - tail) as usize..],
            "{rel}: suffix differs"
        );
        assert_eq!(t.etag(), store.open_file(&key).unwrap().etag(), "{rel}");
        assert_eq!(store.read_whole(&key, 1 << 20).unwrap(), local, "{rel}");
        let rf = store.open_file(&key).unwrap();
        let r = rf.reader(0..n);
        assert!(
            r.read(0, local.len()).unwrap() == local,
            "{rel}: reader differs"
        );
    }
}

/// A sequential read of 20 MiB with read-ahead: exact bytes, few requests.
fn check_big_sequential(store: &RemoteStore) {
    let big = big_data();
    let f = store.open_file(Path::new("up/big.bin")).unwrap();
    let before = store.stats();
    let r = f.reader(0..f.size());
    let step = 128 << 10;
    for off in (0..BIG).step_by(step) {
        let got = r.read(off as u64, step).unwrap();
        assert!(got[..] == big[off..off + got.len()], "big.bin at {off}");
    }
    let s = store.stats();
    assert_eq!(s.bytes_fetched - before.bytes_fetched, BIG as u64);
    assert!(s.gets - before.gets <= 8, "{} GETs", s.gets - before.gets);
}

fn check_listing(store: &RemoteStore) {
    let mut l = store.list(Path::new("up/sharded")).unwrap();
    l.sort_by(|a, b| a.0.cmp(&b.0));
    let mut want: Vec<_> = std::fs::read_dir(common::fixtures().join("sharded"))
        .unwrap()
        .map(|e| (e.unwrap().file_name(), EntryKind::File))
        .collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(l, want);
    // Opening a listed object costs no HEAD: the listing's ETag serves for If-Match.
    let heads = store.stats().heads;
    for (name, _) in &l {
        let key = Path::new("up/sharded").join(name);
        let f = store.open_file(&key).unwrap();
        let local = std::fs::read(common::fixtures().join("sharded").join(name)).unwrap();
        let mut b = vec![0u8; local.len()];
        f.read_at(&mut b, 0)
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert!(b == local, "{name:?}");
    }
    assert_eq!(store.stats().heads, heads);
    let l = store.list(Path::new("up/demo_savedmodel")).unwrap();
    assert!(l.contains(&("variables".into(), EntryKind::Dir)), "{l:?}");
    assert!(
        l.contains(&("saved_model.pb".into(), EntryKind::File)),
        "{l:?}"
    );
    assert_eq!(
        store.kind(Path::new("up/demo_savedmodel/variables")),
        Some(EntryKind::Dir)
    );
    assert_eq!(store.kind(Path::new("up/sharded/model.ckpt")), None);
    assert_eq!(store.kind(Path::new("up/nope")), None);
}

/// An object rewritten after it was opened: the next GET fails (If-Match or the answer's
/// ETag), the file stays failed, no mixed bytes.
fn check_rewrite(store: &RemoteStore, rewrite: impl FnOnce()) {
    let f = store.open_file(Path::new("up/rewritten.bin")).unwrap();
    let first = f.reader(0..4).read(0, 4).unwrap();
    assert_eq!(first, b"old1");
    rewrite();
    let e = f.read_at(&mut [0u8; 4], 2 * 1024 * 1024 + 4).unwrap_err();
    assert!(matches!(e, RemoteError::Changed { .. }), "{e}");
    assert!(tfmount::source::bytes::ByteSource::changed(&*f));
    assert!(f.read_at(&mut [0u8; 4], 0).is_err());
    let g = store.open_file(Path::new("up/rewritten.bin")).unwrap();
    assert_eq!(g.reader(0..4).read(0, 4).unwrap(), b"new2");
}

fn rewritten(v: &str) -> Vec<u8> {
    let mut d = vec![b'.'; 3 << 20];
    d[..4].copy_from_slice(v.as_bytes());
    d
}

/// A server that stops answering mid-read: errors within `remote_timeout`, then reads work.
fn check_stall(store: &RemoteStore, stop: impl FnOnce(), restart: impl FnOnce()) {
    let big = big_data();
    let f = store.open_file(Path::new("up/big.bin")).unwrap();
    // A reader of the first 2 MiB: one GET of them (a first read of the object starts no
    // read-ahead past them).
    let r = f.reader(0..2 << 20);
    for off in (0..(2 << 20)).step_by(128 << 10) {
        assert!(
            r.read(off, 128 << 10).unwrap()[..] == big[off as usize..off as usize + (128 << 10)]
        );
    }
    stop();
    let t = Instant::now();
    // A reader of bytes the first one has not fetched.
    let r2 = f.reader(16 << 20..f.size());
    let Err(e) = r2.read(16 << 20, 4096) else {
        panic!("a read succeeded while the server was stopped")
    };
    let Err(e2) = store.open_file(Path::new("up/big.bin")) else {
        panic!("an open succeeded while the server was stopped")
    };
    let took = t.elapsed();
    assert!(took < TIMEOUT * 2 + Duration::from_secs(3), "{took:?}: {e}");
    assert!(!e.to_string().contains('\n'), "{e}");
    eprintln!("stopped server: {e} / {e2} ({took:?})");
    restart();
    let got = r2.read(16 << 20, 4096).unwrap();
    assert!(got[..] == big[16 << 20..(16 << 20) + 4096]);
    assert!(!tfmount::source::bytes::ByteSource::changed(&*f));
}

fn cfg_of(pairs: &[(String, String)]) -> RemoteConfig {
    let p: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    config(&p)
}

#[test]
fn s3_on_moto() {
    let Some(moto) = Server::moto(&[]) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let (st, _) = http(moto.port, "PUT", "/tfm", &[], b"");
    assert_eq!(st, 200, "create bucket: {}", moto.log());
    let env = s3_env(moto.port, home.path());
    let (store, root) = RemoteStore::open_url("s3://tfm/up/sharded/", &cfg_of(&env)).unwrap();
    // The path of a remote source is its URL, normalized; a relative path is a key too.
    assert_eq!(root, Path::new("s3://tfm/up/sharded"));
    put_all(&store.object_store(), &upload_set());
    put_all(
        &store.object_store(),
        &[("up/rewritten.bin".into(), rewritten("old1"))],
    );
    assert_eq!(store.kind(&root), Some(EntryKind::Dir));
    assert_eq!(store.kind(Path::new("up/sharded")), Some(EntryKind::Dir));
    assert_eq!(store.kind(Path::new("")), Some(EntryKind::Dir));
    assert_eq!(store.kind(Path::new("s3://tfm")), Some(EntryKind::Dir));
    check_fixture_bytes(&store);
    check_listing(&store);
    check_big_sequential(&store);
    let os = store.object_store();
    check_rewrite(&store, || {
        put_all(&os, &[("up/rewritten.bin".into(), rewritten("new2"))])
    });
    // Stops answering (SIGSTOP), then answers again.
    check_stall(&store, || moto.pause(), || moto.resume());

    // Credentials and endpoint from a profile in ~/.aws.
    std::fs::create_dir(home.path().join(".aws")).unwrap();
    std::fs::write(
        home.path().join(".aws/credentials"),
        "[tfm]\naws_access_key_id = p\naws_secret_access_key = q\n",
    )
    .unwrap();
    std::fs::write(
        home.path().join(".aws/config"),
        format!(
            "[profile tfm]\nregion = eu-west-1\ns3 =\n  endpoint_url = http://127.0.0.1:{}\n",
            moto.port
        ),
    )
    .unwrap();
    let c = config(&[
        ("HOME", home.path().to_str().unwrap()),
        ("AWS_PROFILE", "tfm"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]);
    let (p, _) = RemoteStore::open_url("s3://tfm", &c).unwrap();
    assert!(
        p.credentials().contains("profile `tfm`"),
        "{}",
        p.credentials()
    );
    let idx = "up/sharded/model.ckpt.index";
    assert_eq!(
        p.read_whole(Path::new(idx), 1 << 20).unwrap(),
        std::fs::read(common::fixtures().join("sharded/model.ckpt.index")).unwrap()
    );

    // An unknown bucket: one line, no wait.
    let (nb, root) = RemoteStore::open_url("s3://no-such-bucket/x", &cfg_of(&env)).unwrap();
    let t = Instant::now();
    let e = nb.try_kind(&root).unwrap_err();
    assert!(e.to_string().contains("no such bucket"), "{e}");
    assert!(!e.to_string().contains('\n'), "{e}");
    assert!(t.elapsed() < TIMEOUT, "{:?}", t.elapsed());

    // A public bucket, anonymously.
    let (st, _) = http(
        moto.port,
        "PUT",
        "/public",
        &[("x-amz-acl", "public-read")],
        b"",
    );
    assert_eq!(st, 200);
    let (st, _) = http(
        moto.port,
        "PUT",
        "/public/a.txt",
        &[("x-amz-acl", "public-read")],
        b"hello",
    );
    assert_eq!(st, 200);
    let mut c = config(&[
        (
            "AWS_ENDPOINT_URL",
            &format!("http://127.0.0.1:{}", moto.port),
        ),
        ("HOME", home.path().to_str().unwrap()),
    ]);
    c.anonymous = true;
    let (anon, _) = RemoteStore::open_url("s3://public", &c).unwrap();
    assert_eq!(anon.read_whole(Path::new("a.txt"), 100).unwrap(), b"hello");
}

#[test]
fn s3_wrong_credentials_fail_at_once() {
    // Every request must carry credentials moto knows.
    let Some(moto) = Server::moto(&[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let env = s3_env(moto.port, home.path());
    let (store, root) = RemoteStore::open_url("s3://tfm/x", &cfg_of(&env)).unwrap();
    let t = Instant::now();
    let e = store.try_kind(&root).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("403") || msg.contains("InvalidAccessKeyId"),
        "{msg}"
    );
    assert!(msg.starts_with("s3://tfm/x"), "{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    assert!(t.elapsed() < TIMEOUT, "{:?}", t.elapsed());
    let e = store.open_file(&root).unwrap_err();
    assert!(matches!(e, RemoteError::Request { .. }), "{e}");
}

#[test]
fn gcs_on_fake_gcs_server() {
    let Some(gcs) = Server::fake_gcs() else {
        return;
    };
    gcs_bucket(gcs.port, "tfm");
    let home = tempfile::tempdir().unwrap();
    let key = gcs_key_file(home.path(), gcs.port);
    let c = config(&[
        ("GOOGLE_APPLICATION_CREDENTIALS", key.to_str().unwrap()),
        ("HOME", home.path().to_str().unwrap()),
        ("NO_GCE_CHECK", "true"),
    ]);
    let (store, root) = RemoteStore::open_url("gs://tfm/up/demo_savedmodel", &c).unwrap();
    assert!(store.credentials().contains("fake-gcs.json"));
    gcs_put(gcs.port, "tfm", &upload_set());
    gcs_put(
        gcs.port,
        "tfm",
        &[("up/rewritten.bin".into(), rewritten("old1"))],
    );
    assert_eq!(store.kind(&root), Some(EntryKind::Dir));
    check_fixture_bytes(&store);
    check_listing(&store);
    check_big_sequential(&store);
    // fake-gcs-server ignores If-Match: the answer's ETag catches the rewrite.
    check_rewrite(&store, || {
        gcs_put(
            gcs.port,
            "tfm",
            &[("up/rewritten.bin".into(), rewritten("new2"))],
        )
    });
    // The emulator variable works too.
    let c2 = config(&[
        ("STORAGE_EMULATOR_HOST", &format!("127.0.0.1:{}", gcs.port)),
        ("HOME", home.path().to_str().unwrap()),
    ]);
    let (s2, _) = RemoteStore::open_url("gs://tfm", &c2).unwrap();
    let idx = "up/sharded/model.ckpt.index";
    assert_eq!(
        s2.read_whole(Path::new(idx), 1 << 20).unwrap(),
        std::fs::read(common::fixtures().join("sharded/model.ckpt.index")).unwrap()
    );
    // An unknown bucket: fake-gcs-server answers 500 (GCS: 404, "no such bucket"); either way
    // an error, one line, within the bound.
    let (nb, root) = RemoteStore::open_url("gs://no-such-bucket/x", &c).unwrap();
    let t = Instant::now();
    let e = nb.try_kind(&root).unwrap_err().to_string();
    assert!(
        e.starts_with("gs://no-such-bucket/") && !e.contains('\n'),
        "{e}"
    );
    assert!(
        t.elapsed() < TIMEOUT + Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
    check_stall(&store, || gcs.pause(), || gcs.resume());
}

#[test]
fn http_on_nginx() {
    let Some(mut ng) = Server::nginx() else {
        return;
    };
    let root_dir = ng.root();
    for (k, v) in upload_set()
        .into_iter()
        .chain([("up/rewritten.bin".to_string(), rewritten("old1"))])
    {
        let p = root_dir.join(&k);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v).unwrap();
    }
    let url = format!("{}/up/sharded/model.ckpt", ng.url());
    let (store, root) = RemoteStore::open_url(&url, &config(&[])).unwrap();
    // The path of a remote source is its URL (messages name it).
    assert_eq!(root, Path::new(&url));
    check_fixture_bytes(&store);
    check_big_sequential(&store);
    // Directories: told by `path/`; listing is not possible.
    assert_eq!(
        store.kind(Path::new("up/demo_savedmodel")),
        Some(EntryKind::Dir)
    );
    assert_eq!(store.kind(Path::new("up/nope")), None);
    assert_eq!(store.kind(&root), None);
    let e = store.list(Path::new("up/sharded")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::Unsupported, "{e}");
    let rw = root_dir.join("up/rewritten.bin");
    check_rewrite(&store, || {
        // A different size and time: a different ETag.
        let mut d = rewritten("new2");
        d.push(b'!');
        std::fs::write(&rw, d).unwrap();
    });
    // The server stopped mid-read, then started again.
    let port = ng.port;
    let ng2 = std::cell::RefCell::new(&mut ng);
    check_stall(
        &store,
        || ng2.borrow_mut().stop(),
        || ng2.borrow_mut().start(),
    );
    assert_eq!(ng.port, port);
}

/// Every file below `dir`, relative, with its bytes.
fn tree_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    common::walk_files(dir)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(dir.join(&p)).unwrap();
            (p, b)
        })
        .collect()
}

/// `tfmount export` from object storage writes what it writes from the same files on disk,
/// byte for byte: a checkpoint (to TF and to `.safetensors`) and a SavedModel (its files
/// copied through the store, its variables rewritten).
#[test]
fn export_from_s3_writes_what_it_writes_from_disk() {
    let Some(moto) = Server::moto(&[]) else {
        return;
    };
    let home = tempfile::tempdir().unwrap();
    let (st, _) = http(moto.port, "PUT", "/tfm", &[], b"");
    assert_eq!(st, 200, "create bucket: {}", moto.log());
    let env = s3_env(moto.port, home.path());
    let (store, _) = RemoteStore::open_url("s3://tfm/", &cfg_of(&env)).unwrap();
    put_all(&store.object_store(), &upload_set());
    let out = tempfile::tempdir().unwrap();
    let o = out.path();
    let export = |args: &[&std::ffi::OsStr]| {
        let mut a: Vec<&std::ffi::OsStr> = vec!["export".as_ref()];
        a.extend_from_slice(args);
        let r = common::tfmount_env(&a, &env);
        assert_eq!(
            r.status.code(),
            Some(0),
            "{a:?}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    };
    let f = common::fixtures();
    for (remote, local, name) in [
        (
            "s3://tfm/up/sharded/model.ckpt",
            f.join("sharded/model.ckpt"),
            "ckpt",
        ),
        (
            "s3://tfm/up/demo_savedmodel",
            f.join("demo_savedmodel"),
            "sm",
        ),
    ] {
        let (r, l) = (o.join(format!("r_{name}")), o.join(format!("l_{name}")));
        let (rs, ls) = (
            o.join(format!("r_{name}.safetensors")),
            o.join(format!("l_{name}.safetensors")),
        );
        export(&[remote.as_ref(), r.join("out").as_os_str()]);
        export(&[local.as_os_str(), l.join("out").as_os_str()]);
        let (a, b) = (tree_bytes(&r), tree_bytes(&l));
        assert!(
            a.len() >= 2,
            "{name}: {:?}",
            a.iter().map(|x| &x.0).collect::<Vec<_>>()
        );
        assert_eq!(a, b, "{name}: the export from s3 differs");
        export(&[
            "--drop".as_ref(),
            "label/**".as_ref(),
            remote.as_ref(),
            rs.as_os_str(),
        ]);
        export(&[
            "--drop".as_ref(),
            "label/**".as_ref(),
            local.as_os_str(),
            ls.as_os_str(),
        ]);
        // The same header (but for the source named in __metadata__, and so its padding) and
        // the same data.
        let parts = |p: &Path| {
            let b = std::fs::read(p).unwrap();
            let n = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
            let mut h: serde_json::Value = serde_json::from_slice(&b[8..8 + n]).unwrap();
            let src = h["__metadata__"]
                .as_object_mut()
                .unwrap()
                .remove("tfmount.source");
            (h, src, b[8 + n..].to_vec())
        };
        let (ha, sa, da) = parts(&rs);
        let (hb, sb, db) = parts(&ls);
        assert_eq!(ha, hb, "{name}: the .safetensors header from s3 differs");
        assert_eq!(da, db, "{name}: the .safetensors data from s3 differ");
        assert_eq!(sa, Some(serde_json::json!(remote)));
        assert_eq!(sb, Some(serde_json::json!(local.to_str().unwrap())));
    }
    // The SavedModel: written as one, its graph file the fixture's.
    assert_eq!(
        std::fs::read(o.join("r_sm/out/saved_model.pb")).unwrap(),
        std::fs::read(f.join("demo_savedmodel/saved_model.pb")).unwrap()
    );
}
