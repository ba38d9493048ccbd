//! `tfmount diff A B`: the engine ([`crate::model::diff`]) writing its lines to stdout, the
//! statistics on stderr.

use std::time::Instant;

use crate::cli::DiffArgs;
use crate::model::diff::{named, Diff};
use crate::model::lines::{closed, Lines, Val};
use crate::model::open::one_checkpoint;
use crate::model::values::Tolerance;

pub(crate) fn run(args: &DiffArgs) -> i32 {
    let start = Instant::now();
    let open =
        |p: &std::path::Path| one_checkpoint(p).inspect_err(|e| eprintln!("tfmount diff: {e}"));
    let (Ok(a), Ok(b)) = (open(&args.a), open(&args.b)) else {
        return 2;
    };
    if args.names {
        for (side, ck) in [("A", &a), ("B", &b)] {
            if let Err(e) = named(ck) {
                eprintln!("tfmount diff: {side} ({}): {e}", ck.prefix().display());
                return 2;
            }
        }
    }
    let mut d = Diff::new(&a, &b, args.exact, args.same, Lines::to_stdout(args.json));
    d.by_name = args.names;
    if args.values || args.atol.is_some() || args.rtol.is_some() {
        d.values = Some(Tolerance {
            atol: args.atol.unwrap_or(0.0),
            rtol: args.rtol.unwrap_or(0.0),
        });
    }
    d.walk();
    let summary = if d.out.json() && !d.closed {
        let s = &d.stats;
        let n = |v: u64| Val::Num(Some(v));
        d.out.record(
            "summary",
            &[
                ("tensors_a", n(s.in_a)),
                ("tensors_b", n(s.in_b)),
                ("added", n(s.added)),
                ("deleted", n(s.deleted)),
                ("type_changed", n(s.typed)),
                ("modified", n(s.modified)),
                ("equal", n(s.equal)),
                ("decided_by_index", n(s.by_index)),
                ("decided_by_bytes", n(s.by_bytes)),
                (
                    "data_bytes_read",
                    n(a.data_bytes_read() + b.data_bytes_read()),
                ),
            ],
        )
    } else {
        Ok(())
    };
    if let Err(e) = summary.and_then(|()| d.out.flush()) {
        if !closed(&e) {
            eprintln!("tfmount diff: stdout: {e}");
            d.trouble = true;
        }
    }
    if args.stats {
        let s = &d.stats;
        eprintln!(
            "diff: A {} tensors, B {} tensors; added {}, deleted {}, type {}, modified {}, equal {}; \
decided by index {}, by bytes {}; data bytes read {} (A {}, B {}); {:.3} s; \
process read {} bytes in all (rchar: indexes included)",
            s.in_a,
            s.in_b,
            s.added,
            s.deleted,
            s.typed,
            s.modified,
            s.equal,
            s.by_index,
            s.by_bytes,
            a.data_bytes_read() + b.data_bytes_read(),
            a.data_bytes_read(),
            b.data_bytes_read(),
            start.elapsed().as_secs_f64(),
            rchar().map_or("?".to_string(), |n| n.to_string())
        );
    }
    if d.trouble {
        2
    } else {
        i32::from(d.differ)
    }
}

/// Bytes this process has read with read(2) and friends (`rchar` of /proc/self/io): a check of
/// the data-byte count that does not depend on it.
fn rchar() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
}
