//! `tfmount cache ls|clear [DIR]`: what a disk cache (`cache_dir`) holds, and emptying it.

use std::io::Write;
use std::path::PathBuf;
use std::time::UNIX_EPOCH;

use crate::cli::CacheCommand;
use crate::model::lines::closed;
use crate::source::remote::config::{default_cache_dir, Env, CACHE_DIR_ENV};
use crate::source::remote::disk;

/// DIR, else the default disk cache (`TFMOUNT_CACHE_DIR`, `$XDG_CACHE_HOME/tfmount`,
/// `~/.cache/tfmount`).
fn dir_of(given: &Option<PathBuf>) -> Result<PathBuf, String> {
    given
        .clone()
        .or_else(|| default_cache_dir(&Env::from_process()))
        .ok_or_else(|| {
            format!("no cache directory: give DIR ({CACHE_DIR_ENV}=none turns the default off)")
        })
}

pub(crate) fn run(cmd: &CacheCommand) -> i32 {
    match cmd {
        CacheCommand::Ls(a) => ls(&a.dir),
        CacheCommand::Clear(a) => clear(&a.dir, a.prefix.as_deref()),
    }
}

fn ls(dir: &Option<PathBuf>) -> i32 {
    let listed = match dir_of(dir).and_then(|d| disk::list(&d)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("tfmount cache ls: {e}");
            return 2;
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut total = 0;
    for o in &listed {
        total += o.bytes;
        let used = o
            .last_used
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or("-".to_string(), |d| d.as_secs().to_string());
        let line = format!(
            "{}\t{}\t{}\t{used}\t{}\t{}\n",
            o.bytes,
            o.size,
            o.pieces,
            String::from_utf8_lossy(&crate::model::lines::escape(o.url.as_bytes())),
            o.identity
        );
        if let Err(e) = out.write_all(line.as_bytes()) {
            if !closed(&e) {
                eprintln!("tfmount cache ls: stdout: {e}");
                return 1;
            }
            return 0;
        }
    }
    if let Err(e) = out.flush() {
        if !closed(&e) {
            eprintln!("tfmount cache ls: stdout: {e}");
            return 1;
        }
    }
    eprintln!(
        "cache: {} object version{}, {total} bytes cached",
        listed.len(),
        if listed.len() == 1 { "" } else { "s" }
    );
    0
}

fn clear(dir: &Option<PathBuf>, prefix: Option<&str>) -> i32 {
    match dir_of(dir).and_then(|d| disk::clear(&d, prefix)) {
        Ok((n, bytes)) => {
            eprintln!(
                "cache: {n} object version{} removed, {bytes} bytes freed",
                if n == 1 { "" } else { "s" }
            );
            0
        }
        Err(e) => {
            eprintln!("tfmount cache clear: {e}");
            2
        }
    }
}
