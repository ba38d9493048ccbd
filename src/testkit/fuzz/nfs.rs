//! Fuzz body for the NFS adapter (`tfmount::nfs::proto`): one input is a sequence of RPC
//! records (`split_chunks`' layout), each answered by [`Service::call`] over a small fixed tree
//! (a V2 checkpoint of three tensors, mounted through `Fs`), as the server answers a client.
//!
//! Invariants: a call is answered with its own xid, as a REPLY; a reply is bounded (a READ's
//! data by `RTMAX`, the rest by the largest listing reply and a little); and nothing the
//! client sends, garbage or not, changes the tree (a GETATTR of the root after the calls still
//! answers).
//!
//! The service's handles carry instance 0, so that the seeds' handles (a MNT of `/`, then
//! LOOKUPs) name real nodes and mutations reach every procedure.

use std::sync::{Arc, OnceLock};

use crate::fs::{Fs, Options};
use crate::nfs::proto::{Service, MOUNT, NFS, RTMAX};
use crate::parse::dtype::DType;
use crate::testkit::writer::CheckpointWriter;

use super::{join_chunks, split_chunks};

/// The most records one input is cut into.
const MAX_CALLS: usize = 64;

/// The service over the fixed tree, made once per process (its files stay for the process).
fn service() -> Option<&'static Service> {
    static SERVICE: OnceLock<Option<(tempfile::TempDir, Service)>> = OnceLock::new();
    SERVICE
        .get_or_init(|| {
            let dir = super::scratch_dir();
            let prefix = dir.path().join("ckpt");
            let mut w = CheckpointWriter::new(&prefix, 1).ok()?;
            let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
            w.add(
                b"dense/kernel",
                DType(1),
                &[2, 3],
                &f32s(&[1., 2., 3., 4., 5., 6.]),
                0,
            )
            .ok()?;
            w.add(b"dense/bias", DType(1), &[3], &f32s(&[0.5, -1., 2.]), 0)
                .ok()?;
            w.add(b"step", DType(9), &[], &7i64.to_le_bytes(), 0).ok()?;
            w.finish().ok()?;
            let probed = crate::probe::probe(&prefix).ok()?;
            let opts = Options {
                live: false,
                ..Options::default()
            };
            let fs = Arc::new(Fs::new(&probed, &opts).ok()?);
            let service = Service::with_instance(fs, 2049, Box::new(|_| {}), 0);
            Some((dir, service))
        })
        .as_ref()
        .map(|(_, s)| s)
}

pub(crate) fn nfs(data: &[u8]) {
    let Some(service) = service() else {
        return;
    };
    for record in split_chunks(data, MAX_CALLS) {
        let Some(reply) = service.call(record) else {
            continue;
        };
        assert!(
            record.len() >= 8,
            "a reply to a record without a call header"
        );
        assert_eq!(reply.head.get(..4), record.get(..4), "the call's xid");
        assert_eq!(reply.head.get(4..8), Some(&[0, 0, 0, 1][..]), "a REPLY");
        assert!(reply.data.len() <= RTMAX as usize, "a READ over rtmax");
        assert!(
            reply.head.len() <= (1 << 20) + 4096,
            "a reply over its bound"
        );
    }
    let root = service.call(&call(1, NFS, 1, &opaque(&root_handle(service))));
    assert!(
        root.is_some_and(|r| r.head.get(24..28) == Some(&[0, 0, 0, 0][..])),
        "the root's GETATTR after the calls"
    );
}

fn u32s(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_be_bytes()).collect()
}

fn opaque(b: &[u8]) -> Vec<u8> {
    let mut out = u32s(&[b.len() as u32]);
    out.extend_from_slice(b);
    out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
    out
}

/// A call record: xid, CALL, RPC 2, program, version 3, procedure, null credentials and
/// verifier, then `args`.
fn call(xid: u32, prog: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut out = u32s(&[xid, 0, 2, prog, 3, proc_, 0, 0, 0, 0]);
    out.extend_from_slice(args);
    out
}

/// The handle a MNT or LOOKUP `call` answers with (after the reply's 24-byte header and the
/// status), or none.
fn handle_of(service: &Service, call: &[u8]) -> Vec<u8> {
    let Some(r) = service.call(call) else {
        return Vec::new();
    };
    let h = r
        .head
        .get(28..32)
        .map_or(0, |n| u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as usize);
    r.head
        .get(32..32 + h)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// The handle of `/` (from a MNT).
fn root_handle(service: &Service) -> Vec<u8> {
    handle_of(service, &call(1, MOUNT, 1, &opaque(b"/")))
}

/// The handle `name` has in directory `dir` (from a LOOKUP).
fn lookup(service: &Service, dir: &[u8], name: &[u8]) -> Vec<u8> {
    handle_of(
        service,
        &call(2, NFS, 3, &[opaque(dir), opaque(name)].concat()),
    )
}

/// Seeds: a client's session (MNT, FSINFO, GETATTR, LOOKUPs, ACCESS, READDIR and READDIRPLUS
/// from 0 and from a cookie, READs, READLINK, a write refused, UMNT) as one input, and each
/// call alone.
pub(crate) fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let Some(service) = service() else {
        return Vec::new();
    };
    let root = root_handle(service);
    let vars = lookup(service, &root, b"variables");
    let dense = lookup(service, &vars, b"dense");
    let kernel = lookup(service, &dense, b"kernel.npy");
    let summary = lookup(service, &root, b"summary.txt");
    let with = |h: &[u8], rest: &[u32]| {
        let mut a = opaque(h);
        a.extend_from_slice(&u32s(rest));
        a
    };
    let calls: Vec<(&str, Vec<u8>)> = vec![
        ("null", call(1, NFS, 0, &[])),
        ("mnt", call(2, MOUNT, 1, &opaque(b"/variables"))),
        ("export", call(3, MOUNT, 5, &[])),
        ("fsinfo", call(4, NFS, 19, &opaque(&root))),
        ("getattr", call(5, NFS, 1, &opaque(&kernel))),
        (
            "lookup",
            call(6, NFS, 3, &[opaque(&vars), opaque(b"step.bin")].concat()),
        ),
        ("access", call(7, NFS, 4, &with(&kernel, &[0x3f]))),
        (
            "readdir",
            call(8, NFS, 16, &with(&vars, &[0, 0, 0, 0, 4096])),
        ),
        (
            "readdirplus",
            call(9, NFS, 17, &with(&dense, &[0, 3, 0, 0, 512, 4096])),
        ),
        ("read", call(10, NFS, 6, &with(&kernel, &[0, 10, 100]))),
        (
            "read-text",
            call(11, NFS, 6, &with(&summary, &[0, 0, 1 << 20])),
        ),
        (
            "readlink",
            call(12, NFS, 5, &opaque(&lookup(service, &root, b"latest"))),
        ),
        (
            "write",
            call(13, NFS, 7, &with(&kernel, &[0, 0, 4, 1, 4, 0])),
        ),
        ("pathconf", call(14, NFS, 20, &opaque(&root))),
        ("fsstat", call(15, NFS, 18, &opaque(&root))),
        ("getport", call(16, 100_000, 3, &u32s(&[NFS, 3, 6, 0]))),
        ("umnt", call(17, MOUNT, 3, &opaque(b"/"))),
    ];
    let mut out: Vec<(&'static str, String, Vec<u8>)> = calls
        .iter()
        .map(|(name, c)| ("nfs", (*name).to_string(), join_chunks(&[c])))
        .collect();
    let all: Vec<&[u8]> = calls.iter().map(|(_, c)| c.as_slice()).collect();
    out.push(("nfs", "session".to_string(), join_chunks(&all)));
    out
}
