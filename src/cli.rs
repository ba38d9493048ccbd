//! Command-line definitions.

use std::path::PathBuf;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "tfmount",
    version,
    about = "Mount a TensorFlow checkpoint or SavedModel as a read-only directory of tensor files",
    long_about = "Mount a TensorFlow checkpoint or SavedModel as a read-only directory.\n\n\
Every tensor KEY becomes MOUNT/variables/KEY.bin (raw row-major little-endian bytes),\n\
KEY.shape, KEY.dtype and, for dtypes numpy holds natively, KEY.npy. Graphs appear under\n\
MOUNT/meta_graphs/TAGS/ (graph/NODE.pbtxt, functions/, signatures/, constants/), with\n\
MOUNT/graph, MOUNT/functions, ... linking to the default meta graph.\n\n\
SOURCE is a SavedModel directory, a checkpoint directory (with a `checkpoint` state file\n\
or *.index files), or a checkpoint prefix such as dir/model.ckpt-1000 (a path to its\n\
.index or .data-* file works too), or a graph file: a frozen GraphDef (.pb, .pbtxt) or a .meta.",
    after_help = "EXAMPLES:\n  \
tfmount saved_model_dir /mnt/m && ls /mnt/m/variables\n  \
tfmount -f -o nocrc,cache_size=128M train/ckpt-42 /mnt/c\n  \
fusermount3 -u /mnt/m                  # unmount\n\n\
EXIT CODES:\n  0 mounted (or clean unmount in -f)   1 runtime failure   2 usage error\n  \
3 SOURCE missing or not a checkpoint   4 bad MOUNTPOINT   5 FUSE unavailable"
)]
pub struct Args {
    /// SavedModel directory, checkpoint directory, checkpoint prefix, or a graph file
    /// (frozen GraphDef .pb/.pbtxt, or a Saver's .meta).
    pub source: PathBuf,

    /// An existing empty directory to mount on.
    pub mountpoint: PathBuf,

    /// Stay in the foreground (log to stderr; Ctrl-C or SIGTERM unmounts).
    #[arg(short, long)]
    pub foreground: bool,

    /// Comma-separated mount options:
    /// allow_other (every user may read the mount; needs user_allow_other in /etc/fuse.conf
    /// unless root), allow_root, ro (always on), nocrc (skip CRC-32C checks of tensor data),
    /// cache_size=SIZE (decoded index blocks to keep, e.g. 64M; default 32M),
    /// threads=N (request threads, default 2). Example: -o allow_other,nocrc
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub options: Vec<String>,

    /// Skip CRC-32C verification of tensor data (same as -o nocrc).
    #[arg(long)]
    pub no_crc: bool,

    /// Bytes of decoded index blocks to cache, e.g. 64M (same as -o cache_size=).
    #[arg(long, value_name = "SIZE")]
    pub cache_size: Option<String>,

    /// Number of threads serving requests (same as -o threads=).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// The meta graph the top-level graph/, functions/, signatures/ ... links point to, as its
    /// comma-separated tag set, e.g. --tags serve,gpu (default: the only meta graph, else the
    /// one tagged exactly "serve").
    #[arg(long, value_name = "TAGS")]
    pub tags: Option<String>,

    /// In the background, append log lines to this file (default: discarded).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
}

/// Parses sizes like `4096`, `64K`, `32M`, `1G`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: usize = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("bad size suffix in {s:?}")),
            };
            (&s[..i], m)
        }
        _ => (s, 1),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| format!("bad size {s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("32m"), Ok(32 << 20));
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("").is_err());
    }
}
