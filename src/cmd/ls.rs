//! `tfmount ls [-l] [-R] SOURCE [PATH]`: the entries of a directory of the tree a mount would
//! show, in readdir order; `-l` adds type and size, `-R` recurses (paths relative to PATH);
//! `--json`: one object per entry, always with its type and size.

use std::io;

use super::arg_bytes;
use crate::cli::LsArgs;
use crate::model::lines::{closed, escape, Lines, Val};
use crate::model::open::{Node, NodeKind, Tree};

pub(crate) fn run(args: &LsArgs) -> i32 {
    let tree = match Tree::open(&args.source) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tfmount ls: {e}");
            return 3;
        }
    };
    let path = args.path.as_deref().map(arg_bytes).unwrap_or(b"");
    let shown = String::from_utf8_lossy(&escape(path)).into_owned();
    let node = match tree.resolve(path, true) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("tfmount ls: {shown}: {e}");
            return 1;
        }
    };
    let mut ls = Ls {
        tree: &tree,
        long: args.long || args.json,
        out: Lines::to_stdout(args.json),
        failed: false,
    };
    let r = if node.kind == NodeKind::Dir {
        ls.dir(node, &[], args.recursive, &shown)
    } else {
        // Like ls(1): a file is listed as itself.
        let name = path
            .rsplit(|&b| b == b'/')
            .find(|c| !c.is_empty())
            .unwrap_or(path);
        ls.entry(name, node)
    };
    match r.and_then(|()| ls.out.flush()) {
        Ok(()) => i32::from(ls.failed),
        Err(e) if closed(&e) => i32::from(ls.failed),
        Err(e) => {
            eprintln!("tfmount ls: stdout: {e}");
            1
        }
    }
}

struct Ls<'t> {
    tree: &'t Tree,
    long: bool,
    out: Lines,
    failed: bool,
}

impl Ls<'_> {
    /// Prints one entry; `name` is its name or its path relative to PATH.
    fn entry(&mut self, name: &[u8], node: Node) -> io::Result<()> {
        if !self.long {
            return self.out.record("entry", &[("path", Val::Bytes(name))]);
        }
        let size = match self.tree.size(node) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!(
                    "tfmount ls: {}: {e}",
                    String::from_utf8_lossy(&escape(name))
                );
                self.failed = true;
                None
            }
        };
        let (letter, kind) = match node.kind {
            NodeKind::Dir => ("d", "dir"),
            NodeKind::File => ("f", "file"),
            NodeKind::Symlink => ("l", "symlink"),
        };
        let target = match node.kind {
            NodeKind::Symlink => Some(self.tree.readlink(node).unwrap_or_default()),
            _ => None,
        };
        let mut fields = vec![
            ("kind", Val::Bytes(letter.as_bytes())),
            ("size", Val::Num(size)),
            ("path", Val::Bytes(name)),
        ];
        if let Some(t) = &target {
            fields.push(("target", Val::Bytes(t)));
        }
        // JSON names the kind in the record's type; text shows its letter first, as `ls -l`.
        let shown = if self.out.json() {
            &fields[1..]
        } else {
            &fields[..]
        };
        self.out.record(kind, shown)
    }

    /// Lists directory `dir`, whose path relative to PATH is `rel` (empty for PATH itself).
    fn dir(&mut self, dir: Node, rel: &[u8], recursive: bool, shown: &str) -> io::Result<()> {
        let entries = match self.tree.list(dir) {
            Ok(e) => e,
            Err(e) => {
                let at = if rel.is_empty() {
                    shown.to_string()
                } else {
                    String::from_utf8_lossy(&escape(rel)).into_owned()
                };
                eprintln!("tfmount ls: {at}: {e}");
                self.failed = true;
                return Ok(());
            }
        };
        for e in entries {
            let path = if rel.is_empty() {
                e.name.clone()
            } else {
                [rel, b"/", &e.name].concat()
            };
            self.entry(if recursive { &path } else { &e.name }, e.node)?;
            if recursive && e.node.kind == NodeKind::Dir {
                self.dir(e.node, &path, true, shown)?;
            }
        }
        Ok(())
    }
}
