//! `tfmount cat SOURCE PATH...`: the bytes of files of the tree a mount would show, on stdout,
//! byte-identical to reading them through a mount.

use std::io::{self, Write};

use super::arg_bytes;
use crate::cli::CatArgs;
use crate::model::lines::{closed, escape};
use crate::model::open::Tree;

/// Bytes asked for per read (as a mount's readahead would).
const CHUNK: usize = 1 << 20;

pub(crate) fn run(args: &CatArgs) -> i32 {
    let tree = match Tree::open(&args.source) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tfmount cat: {e}");
            return 3;
        }
    };
    let mut out = io::stdout().lock();
    let mut status = 0;
    for p in &args.paths {
        let path = arg_bytes(p);
        let shown = String::from_utf8_lossy(&escape(path)).into_owned();
        match copy(&tree, path, &mut out) {
            Ok(()) => {}
            Err(Failure::Closed) => return status,
            Err(Failure::Stdout(e)) => {
                eprintln!("tfmount cat: stdout: {e}");
                return 1;
            }
            Err(Failure::File(e)) => {
                eprintln!("tfmount cat: {shown}: {e}");
                status = 1;
            }
        }
    }
    match out.flush() {
        Err(e) if !closed(&e) => {
            eprintln!("tfmount cat: stdout: {e}");
            1
        }
        _ => status,
    }
}

enum Failure {
    /// The reader of stdout is gone: stop quietly.
    Closed,
    Stdout(io::Error),
    File(String),
}

fn copy(tree: &Tree, path: &[u8], out: &mut impl Write) -> Result<(), Failure> {
    let node = tree
        .resolve(path, true)
        .map_err(|e| Failure::File(e.to_string()))?;
    let size = tree
        .open_file(node)
        .map_err(|e| Failure::File(e.to_string()))?;
    let mut off = 0u64;
    while off < size {
        let want = (size - off).min(CHUNK as u64) as usize;
        let buf = tree
            .read(node, off, want)
            .map_err(|e| Failure::File(e.to_string()))?;
        if buf.is_empty() {
            break;
        }
        out.write_all(&buf).map_err(|e| {
            if closed(&e) {
                Failure::Closed
            } else {
                Failure::Stdout(e)
            }
        })?;
        off += buf.len() as u64;
    }
    Ok(())
}
