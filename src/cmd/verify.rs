//! `tfmount verify SOURCE`: the engine ([`crate::model::verify`]) writing its problems to
//! stdout, one summary line on stderr.

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::cli::VerifyArgs;
use crate::model::lines::{closed, Lines, Val};
use crate::model::verify::verify;

pub(crate) fn run(args: &VerifyArgs) -> i32 {
    let start = Instant::now();
    let threads = args.threads.map(usize::from);
    let mut v = match verify(
        &args.source,
        threads,
        Lines::to_stdout(args.json),
        true,
        &[],
    ) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tfmount verify: {e}");
            return 3;
        }
    };
    let secs = start.elapsed().as_secs_f64();
    let bytes = v.bytes.load(Ordering::Relaxed);
    let summary = if v.out.json() && !v.closed {
        v.out.record(
            "summary",
            &[
                ("tensors", Val::Num(Some(v.tensors))),
                ("bytes", Val::Num(Some(bytes))),
                ("problems", Val::Num(Some(v.problems))),
                ("unchecked", Val::Num(Some(v.unchecked))),
                (
                    "milliseconds",
                    Val::Num(Some(start.elapsed().as_millis() as u64)),
                ),
            ],
        )
    } else {
        Ok(())
    };
    if let Err(e) = summary.and_then(|()| v.out.flush()) {
        if !closed(&e) {
            eprintln!("tfmount verify: stdout: {e}");
        }
    }
    v.progress.finish_and_clear();
    // A format without checksums: said, so that 0 problems is not read as checked bytes.
    let unchecked = match v.no_checksum {
        Some(why) if v.unchecked > 0 => format!(
            "; {} of them with bytes that cannot be checked: {why} (their layout is checked)",
            v.unchecked
        ),
        _ => String::new(),
    };
    eprintln!(
        "verify: {} tensors, {} bytes, {} problem{}, {:.3} s, {:.1} MB/s{unchecked}",
        v.tensors,
        bytes,
        v.problems,
        if v.problems == 1 { "" } else { "s" },
        secs,
        if secs > 0.0 {
            bytes as f64 / secs / 1e6
        } else {
            0.0
        }
    );
    i32::from(v.problems > 0)
}
