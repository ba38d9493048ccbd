//! The mount options: one table ([`OPTIONS`]) that defines each `-o` option and the long flag
//! that stands for it (name, value grammar, default, help), and the one interpreter of it
//! ([`settings`]). `--help`, the man page and `docs/cli.md` are generated from this table, so
//! they list exactly what the mount accepts.

use std::time::Duration;

use crate::fs::DirectIo;
use crate::fs::Options;
use crate::source::remote::config as remote_config;
use crate::source::remote::config::RemoteConfig;

/// What a value must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    /// No value: `-o name`.
    None,
    /// A byte count: digits, optionally followed by K, M, G or T (powers of 1024), optionally
    /// followed by B or iB: `4096`, `64K`, `32MiB`, `1G`.
    Size,
    /// Whole seconds, or with a unit: `60`, `60s`, `500ms`, `2m`.
    Duration,
    /// A whole number in the range the option names.
    Count { min: usize, max: usize },
    /// One of the words of a `|`-separated list: `auto|always|never`.
    Choice(&'static str),
    /// A directory (no comma), or `none`.
    Dir,
    /// Nothing, or a directory: `-o name` or `-o name=DIR`.
    OptionalDir,
}

impl Value {
    /// The placeholder shown in help (`SIZE`, `N`, ...).
    pub(crate) fn placeholder(self) -> Option<&'static str> {
        match self {
            Value::None => None,
            Value::Size => Some("SIZE"),
            Value::Duration => Some("DURATION"),
            Value::Count { .. } => Some("N"),
            Value::Choice(words) => Some(words),
            Value::Dir | Value::OptionalDir => Some("DIR"),
        }
    }
}

/// One mount option.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MountOpt {
    /// The name after `-o`.
    pub(crate) name: &'static str,
    pub(crate) value: Value,
    /// The long flag that means the same (`--no-crc` for `-o nocrc`), if any.
    pub(crate) flag: Option<&'static str>,
    /// The default, in words (empty when the option is a plain switch).
    pub(crate) default: &'static str,
    /// One or two sentences for `--help`, the man page and the docs.
    pub(crate) help: &'static str,
    /// Accepted for compatibility with mount(8) habits but changes nothing.
    pub(crate) no_op: bool,
    /// Decided when mounting: with the mount point `/dev/fd/N` (a descriptor someone else
    /// mounted) it is the mounter's to set, and is ignored with a warning.
    pub(crate) mount_time: bool,
}

const fn opt(
    name: &'static str,
    value: Value,
    default: &'static str,
    help: &'static str,
) -> MountOpt {
    MountOpt {
        name,
        value,
        flag: None,
        default,
        help,
        no_op: false,
        mount_time: false,
    }
}

const fn flagged(mut o: MountOpt, flag: &'static str) -> MountOpt {
    o.flag = Some(flag);
    o
}

const fn no_op(mut o: MountOpt) -> MountOpt {
    o.no_op = true;
    mount_time(o)
}

const fn mount_time(mut o: MountOpt) -> MountOpt {
    o.mount_time = true;
    o
}

/// Every option the mount accepts, in the order help lists them.
pub(crate) const OPTIONS: &[MountOpt] = &[
    flagged(
        opt(
            "nocrc",
            Value::None,
            "",
            "Skip the CRC-32C check of tensor data (faster first reads of remote tensors; damaged bytes are then served as stored).",
        ),
        "no-crc",
    ),
    opt(
        "crc_first",
        Value::None,
        "",
        "Check a tensor's CRC-32C before serving its first byte (a pass over the whole tensor first). By default a tensor is checked while it is streamed: each byte is read once, and only the read that reaches its end waits for the check (on object storage, a read that does not start at the tensor's beginning checks first). A local .keras file's weights member is checked alike: while its datasets are served, each dataset's last read waiting for it; with crc_first, before the first byte.",
    ),
    flagged(
        opt(
            "cache_size",
            Value::Size,
            "32M",
            "Bytes of decoded index blocks (and resolved tensors) to keep between requests; 0 keeps nothing, so every read sees the index as it is on disk now.",
        ),
        "cache-size",
    ),
    flagged(
        opt(
            "threads",
            Value::Count { min: 1, max: 64 },
            "2",
            "Threads serving kernel requests.",
        ),
        "threads",
    ),
    opt(
        "nolive",
        Value::None,
        "",
        "Mount a checkpoint directory as a snapshot: do not follow its state file (new checkpoints, `latest`) while mounted.",
    ),
    opt(
        "live_grace",
        Value::Duration,
        "10s",
        "How long a followed checkpoint that is not complete yet (a copy in progress: data shards missing or shorter than its index says, a Keras file not written to its end) is waited for, counted from when its files last grew, before it is shown as it is (its missing parts then fail with EIO). One shown as it is is opened again, and shown anew, once its files change (docs/live.md).",
    ),
    mount_time(opt(
        "nonempty",
        Value::None,
        "",
        "Mount on a directory that is not empty (its files are hidden while mounted). Without it tfmount refuses, so that a mistyped mount point does not hide your files.",
    )),
    mount_time(opt(
        "allow_other",
        Value::None,
        "",
        "Every user may read the mount (needs user_allow_other in /etc/fuse.conf unless root).",
    )),
    mount_time(opt(
        "allow_root",
        Value::None,
        "",
        "The owner and root may read the mount.",
    )),
    opt(
        "remote_cache",
        Value::Size,
        "256M",
        "Memory for read-ahead and cached parts of object-storage sources (s3://, gs://, http(s)://), shared by all their files.",
    ),
    opt(
        "remote_timeout",
        Value::Duration,
        "60s",
        "Longest time one object-storage operation (a HEAD, a listing, one read, retries included) may take before the read fails with EIO.",
    ),
    opt(
        "remote_parallel",
        Value::Count { min: 1, max: 64 },
        "8",
        "GETs one reader of an object-storage tensor keeps in flight: a read that starts a tensor fetches up to remote_parallel parts of remote_part bytes at once (within remote_cache), then keeps that far ahead while it is read in order.",
    ),
    opt(
        "remote_part",
        Value::Size,
        "8M",
        "Bytes of one GET of read-ahead (at least 1M); a tensor this small is fetched in one GET.",
    ),
    opt(
        "cache_dir",
        Value::Dir,
        "$TFMOUNT_CACHE_DIR, else $XDG_CACHE_HOME/tfmount, else ~/.cache/tfmount",
        "Keep what is read from object storage in DIR, on local disk, for later mounts (and other processes) to read instead of fetching it again: pieces of each object under DIR/tfmount-v2/, keyed by URL and the object's ETag (or time) and size, each checked by its CRC-32C when read back. A changed object is fetched anew, never served from old pieces. Safe to share between mounts. `none`: no disk cache (memory only). A DIR that cannot be used (read-only, full) is read without, said once in the log. `tfmount cache ls DIR` shows it, `tfmount cache clear DIR` empties it.",
    ),
    opt(
        "cache_max",
        Value::Size,
        "half the free space of cache_dir's file system, plus what the cache holds",
        "Bytes the disk cache of cache_dir may hold: past it, the least recently used pieces are removed, down to 90%. TFMOUNT_CACHE_MAX sets the default.",
    ),
    opt(
        "anonymous",
        Value::None,
        "",
        "Send unsigned requests to object storage (public buckets): no credentials are looked for.",
    ),
    opt(
        "direct_io",
        Value::Choice(DirectIo::VALUES),
        "never",
        "How large tensor files are read. `never`: through the kernel's page cache, shared by every process, and files open without a request to the daemon. `auto`: a tensor's `.bin` or `.npy` of 64 MiB or more is read with direct I/O: around the page cache, each read(2) one request of up to 1 MiB straight into the caller's buffer (mmap still works), nothing kept for the next reader; other files keep the page cache, but every open of a file then costs a request. `always`: direct I/O for every `.bin`, `.npy` and `*.safetensors` file whatever its size.",
    ),
    mount_time(opt(
        "edit",
        Value::OptionalDir,
        "",
        "Make the checkpoint editable (docs/edit.md): inside variables/, rm drops tensors, mv renames them (a directory: every key under it), and writing a whole .npy (cp, numpy.save) gives a tensor new values or adds one; every view shows the edited model at once. SOURCE is never written: the edits are kept in DIR (a journal and the new values; default: a directory under the user's cache directory named for SOURCE and the mount point, said at mount), survive a remount with the same DIR, and are listed by tfmount edits MNT and written by tfmount commit MNT OUT. One checkpoint only (a prefix, a file, a SavedModel).",
    )),
    opt(
        "views",
        Value::Choice("hidden|visible"),
        "hidden",
        "Whether the derived views (`text/`, `stats/`, `names/`, `dequantized/`, `model.safetensors`, `weights.safetensors`) are listed. `hidden`: reachable by path (`cat MNT/text/KEY.txt`, `cd MNT/names`) but not listed, so `du`, `cp -r`, `rsync`, `tar`, `grep -r` and `diff -r` see each tensor's bytes twice (`.bin`, `.npy`), not eight times. `visible`: listed too. The environment variable TFMOUNT_VIEWS sets the default.",
    ),
    no_op(opt(
        "ro",
        Value::None,
        "",
        "Read-only: always on (`rw` is refused).",
    )),
    no_op(opt(
        "nodev",
        Value::None,
        "",
        "Always on.",
    )),
    no_op(opt(
        "nosuid",
        Value::None,
        "",
        "Always on.",
    )),
    no_op(opt(
        "dev",
        Value::None,
        "",
        "Only with MOUNTPOINT /dev/fd/N, where mount.fuse3 passes it (the mount's flags are the mounter's); refused otherwise: tfmount mounts are nodev.",
    )),
    no_op(opt(
        "suid",
        Value::None,
        "",
        "Only with MOUNTPOINT /dev/fd/N, where mount.fuse3 passes it; refused otherwise: tfmount mounts are nosuid.",
    )),
    no_op(opt(
        "default_permissions",
        Value::None,
        "",
        "Always on: the kernel checks the permission bits.",
    )),
];

/// The environment variable that sets `-o views`'s default (`hidden` or `visible`), for
/// scripts and containers; `-o views=...` overrides it.
pub(crate) const VIEWS_ENV: &str = "TFMOUNT_VIEWS";

/// The defaults the environment sets ([`VIEWS_ENV`]), as `-o` lists to apply before the
/// command line's; an unusable value is an error naming the variable.
pub(crate) fn env_defaults() -> Result<Vec<String>, String> {
    match std::env::var(VIEWS_ENV) {
        Ok(v) if v == "hidden" || v == "visible" => Ok(vec![format!("views={v}")]),
        Ok(v) => Err(format!("{VIEWS_ENV}={v:?}: expected hidden or visible")),
        Err(_) => Ok(Vec::new()),
    }
}

/// The settings of a mount (and of `tfmount.open`): the defaults, object storage configured
/// from the environment, the environment's option defaults ([`env_defaults`]), then `options`
/// (each a `-o` list; later ones win). Errors are one line naming the option or variable.
pub(crate) fn settings(options: &[String]) -> Result<Settings, String> {
    let mut s = Settings {
        remote: RemoteConfig::from_env(),
        ..Settings::default()
    };
    let env = env_defaults()?;
    apply(&mut s, env.iter().chain(options).map(String::as_str))?;
    Ok(s)
}

/// The disk cache directory a process with environment `env` and `-o` lists `options` uses
/// for object storage (`tfmount list` asks it of each daemon): the environment's default
/// ([`crate::source::remote::config::default_cache_dir`]), then `options` applied as a mount
/// applies them; `None`: no disk cache.
pub(crate) fn cache_dir_with(
    options: &[String],
    env: &crate::source::remote::config::Env,
) -> Option<std::path::PathBuf> {
    let mut s = Settings::default();
    s.remote.cache_dir = crate::source::remote::config::default_cache_dir(env);
    // The daemon mounted with them: they apply (an error would stop at it, as its mount did).
    let _ = apply(&mut s, options.iter().map(String::as_str));
    s.remote.cache_dir
}

/// Options that only `mount.fuse3` passes (with `-o drop_privileges` it runs
/// `tfmount SOURCE /dev/fd/N -o OPTIONS,dev,suid`): accepted, silently, with `/dev/fd/N` only.
pub(crate) const FROM_MOUNT_FUSE: [&str; 2] = ["dev", "suid"];

/// The mount-time options ([`MountOpt::mount_time`]), comma-separated, for help and messages.
pub(crate) fn mount_time_names() -> String {
    let names: Vec<&str> = OPTIONS
        .iter()
        .filter(|o| o.mount_time)
        .map(|o| o.name)
        .collect();
    names.join(", ")
}

/// The option named `name`.
pub(crate) fn find(name: &str) -> Option<&'static MountOpt> {
    OPTIONS.iter().find(|o| o.name == name)
}

/// Who may use the mount besides its owner (`-o allow_other`, `-o allow_root`): the FUSE
/// session's filter, which `mount` hands to fuser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Owner,
    RootAndOwner,
    All,
}

/// What the mount options set.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) fs: Options,
    pub(crate) acl: Access,
    pub(crate) threads: usize,
    /// Object-storage sources: timeouts, memory budget, credentials.
    pub(crate) remote: RemoteConfig,
    /// Mount even on a non-empty directory.
    pub(crate) nonempty: bool,
    /// Which files are read around the page cache.
    pub(crate) direct_io: DirectIo,
    /// The mount-time options given ([`MountOpt::mount_time`]), by name, in order, once each.
    pub(crate) mount_time: Vec<&'static str>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            fs: Options::default(),
            acl: Access::Owner,
            threads: 2,
            remote: RemoteConfig::default(),
            nonempty: false,
            direct_io: DirectIo::default(),
            mount_time: Vec::new(),
        }
    }
}

/// Parses a size in the grammar of [`Value::Size`].
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    remote_config::parse_size(s)
}

/// Parses a duration in the grammar of [`Value::Duration`].
pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    remote_config::parse_duration(s)
}

/// Applies the comma-separated option lists `lists` (each `-o` argument, in order; later ones
/// win) to `s`. Errors are one line naming the option and what its value must be.
pub(crate) fn apply<'a>(
    s: &mut Settings,
    lists: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    for item in lists.into_iter().flat_map(|l| l.split(',')) {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (item.trim(), None),
        };
        if k.is_empty() && v.is_none() {
            continue;
        }
        if k == "rw" {
            return Err("-o rw: tfmount mounts are always read-only".into());
        }
        let o = find(k)
            .ok_or_else(|| format!("unknown mount option {item:?} (tfmount --help lists them)"))?;
        let value = match (o.value, v) {
            (Value::None, None) => "",
            (Value::None, Some(_)) => return Err(format!("-o {k} takes no value (got {item:?})")),
            (Value::OptionalDir, None) => "",
            (_, None) | (_, Some("")) => {
                return Err(format!("-o {k} needs a value: {k}={}", expected(o.value)))
            }
            (_, Some(v)) => v,
        };
        set(s, o, value).map_err(|()| format!("-o {k}={value}: expected {}", expected(o.value)))?;
        if o.mount_time && !s.mount_time.contains(&o.name) {
            s.mount_time.push(o.name);
        }
    }
    Ok(())
}

/// The value grammar in words, for error messages.
fn expected(v: Value) -> String {
    match v {
        Value::None => "no value".into(),
        Value::Size => "a size like 4096, 64K, 256M or 1GiB".into(),
        Value::Duration => "a duration like 60, 60s, 500ms or 2m".into(),
        Value::Count { min, max } => format!("a whole number from {min} to {max}"),
        Value::Choice(words) => format!("one of {}", words.replace('|', ", ")),
        Value::Dir => "a directory (without a comma), or none".into(),
        Value::OptionalDir => "nothing, or a directory (without a comma)".into(),
    }
}

/// Sets option `o` to `value` (already checked to be present when the option takes one).
fn set(s: &mut Settings, o: &MountOpt, value: &str) -> Result<(), ()> {
    let size = || parse_size(value).ok_or(());
    // A whole number in the option's range.
    let count = || match o.value {
        Value::Count { min, max } => value
            .parse()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or(()),
        _ => Err(()),
    };
    match o.name {
        "nocrc" => s.fs.verify_crc = false,
        "crc_first" => s.fs.crc_first = true,
        "cache_size" => s.fs.cache_bytes = usize::try_from(size()?).map_err(|_| ())?,
        "threads" => s.threads = count()?,
        "nolive" => s.fs.live = false,
        "live_grace" => s.fs.live_grace = parse_duration(value).ok_or(())?,
        "nonempty" => s.nonempty = true,
        "allow_other" => s.acl = Access::All,
        "allow_root" => s.acl = Access::RootAndOwner,
        "remote_cache" => s.remote.cache_bytes = size()?,
        "remote_timeout" => s.remote.timeout = parse_duration(value).ok_or(())?,
        "anonymous" => s.remote.anonymous = true,
        "cache_dir" => {
            s.remote.cache_dir = (value != "none").then(|| std::path::PathBuf::from(value))
        }
        "cache_max" => s.remote.cache_max = Some(size()?),
        "remote_parallel" => s.remote.parallel = count()?,
        "remote_part" => s.remote.part = size()?.max(1 << 20),
        "direct_io" => s.direct_io = DirectIo::parse(value).ok_or(())?,
        "edit" => s.fs.edit = Some(std::path::PathBuf::from(value)),
        "views" => {
            s.fs.views_visible = match value {
                "visible" => true,
                "hidden" => false,
                _ => return Err(()),
            }
        }
        _ if o.no_op => {}
        // An option in the table that nothing sets: a programming error caught by the unit
        // test below, refused rather than ignored.
        _ => return Err(()),
    }
    Ok(())
}

/// The `-o` help: one entry per option, as `--help` and the man page show it.
pub(crate) fn help_text() -> String {
    let mut out = String::from(
        "Comma-separated mount options (the same option may be given several times; later ones win):\n",
    );
    for o in OPTIONS {
        out.push_str(&format!("\n  {}", usage(o)));
        if let Some(f) = o.flag {
            out.push_str(&format!("   (also --{f}"));
            if let Some(p) = o.value.placeholder() {
                out.push_str(&format!(" {p}"));
            }
            out.push(')');
        }
        out.push_str(&format!("\n      {}", o.help));
        if !o.default.is_empty() {
            out.push_str(&format!(" Default: {}.", o.default));
        }
        out.push('\n');
    }
    out.push_str(
        "\nSIZE is a byte count with an optional K, M, G or T (powers of 1024) and an optional B or iB: \
4096, 64K, 32MiB, 1G. DURATION is seconds, or a number with ms, s or m: 60, 500ms, 2m.\n\
Example: -o allow_other,nocrc,cache_size=128M",
    );
    out
}

/// `name` or `name=PLACEHOLDER`.
pub(crate) fn usage(o: &MountOpt) -> String {
    if matches!(o.value, Value::OptionalDir) {
        return format!("{}[=DIR]", o.name);
    }
    match o.value.placeholder() {
        Some(p) => format!("{}={p}", o.name),
        None => o.name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(lists: &[&str]) -> Result<Settings, String> {
        let mut s = Settings::default();
        apply(&mut s, lists.iter().copied()).map(|()| s)
    }

    /// Every option in the table is accepted with a valid value, and does what it says or is a
    /// declared no-op: nothing in the table is silently ignored.
    /// What `tfmount list` says a daemon's cache is: its `cache_dir` option as the mount reads
    /// it (the last one wins, `none` turns it off), else its environment's default.
    #[test]
    fn a_daemons_cache_directory() {
        let env = crate::source::remote::config::Env::from_pairs([(
            "HOME".to_string(),
            "/home/u".to_string(),
        )]);
        let dir = |o: &[&str]| {
            let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
            cache_dir_with(&o, &env)
        };
        let p = |s: &str| Some(std::path::PathBuf::from(s));
        assert_eq!(dir(&["nocrc"]), p("/home/u/.cache/tfmount"));
        assert_eq!(dir(&["cache_dir=/a,nocrc", "cache_dir=/b"]), p("/b"));
        assert_eq!(dir(&["cache_dir=/a", "cache_dir=none"]), None);
    }

    #[test]
    fn every_option_in_the_table_is_accepted() {
        for o in OPTIONS {
            let arg = match o.value {
                Value::None => o.name.to_string(),
                Value::Size => format!("{}=1GiB", o.name),
                Value::Duration => format!("{}=5s", o.name),
                Value::Dir | Value::OptionalDir => format!("{}=/tmp/x", o.name),
                Value::Count { max, .. } => format!("{}={max}", o.name),
                Value::Choice(words) => {
                    let other = words.split('|').find(|w| *w != o.default);
                    format!("{}={}", o.name, other.unwrap_or_default())
                }
            };
            let s = parsed(&[&arg]).unwrap_or_else(|e| panic!("{arg}: {e}"));
            let d = Settings::default();
            let changed = s.fs.verify_crc != d.fs.verify_crc
                || s.fs.crc_first != d.fs.crc_first
                || s.fs.cache_bytes != d.fs.cache_bytes
                || s.fs.live != d.fs.live
                || s.fs.live_grace != d.fs.live_grace
                || s.fs.views_visible != d.fs.views_visible
                || s.fs.edit != d.fs.edit
                || s.threads != d.threads
                || s.nonempty != d.nonempty
                || s.acl != d.acl
                || s.remote.cache_bytes != d.remote.cache_bytes
                || s.remote.timeout != d.remote.timeout
                || s.remote.anonymous != d.remote.anonymous
                || s.remote.cache_dir != d.remote.cache_dir
                || s.remote.cache_max != d.remote.cache_max
                || s.remote.parallel != d.remote.parallel
                || s.remote.part != d.remote.part
                || s.direct_io != d.direct_io;
            assert_eq!(changed, !o.no_op, "{arg}");
        }
    }

    #[test]
    fn one_size_grammar_for_every_size_option() {
        let s = parsed(&["cache_size=1GiB,remote_cache=1GiB"]).unwrap();
        assert_eq!(s.fs.cache_bytes, 1 << 30);
        assert_eq!(s.remote.cache_bytes, 1 << 30);
        let s = parsed(&["cache_size=64K", "remote_cache=32m"]).unwrap();
        assert_eq!(
            (s.fs.cache_bytes, s.remote.cache_bytes),
            (64 << 10, 32 << 20)
        );
        assert_eq!(parsed(&["cache_size=0"]).unwrap().fs.cache_bytes, 0);
    }

    #[test]
    fn errors_name_the_option_and_the_grammar() {
        let e = |l: &str| parsed(&[l]).unwrap_err();
        assert_eq!(
            e("cache_size=12Q"),
            "-o cache_size=12Q: expected a size like 4096, 64K, 256M or 1GiB"
        );
        assert_eq!(
            e("threads=0"),
            "-o threads=0: expected a whole number from 1 to 64"
        );
        assert_eq!(
            e("threads"),
            "-o threads needs a value: threads=a whole number from 1 to 64"
        );
        assert_eq!(e("nocrc=1"), "-o nocrc takes no value (got \"nocrc=1\")");
        assert_eq!(e("rw"), "-o rw: tfmount mounts are always read-only");
        assert!(e("bogus").starts_with("unknown mount option \"bogus\""));
        assert!(parsed(&["", "ro,,nodev"]).is_ok());
    }

    #[test]
    fn direct_io_takes_one_of_its_words() {
        for (w, d) in [
            ("never", DirectIo::Never),
            ("auto", DirectIo::Auto),
            ("always", DirectIo::Always),
        ] {
            assert_eq!(parsed(&[&format!("direct_io={w}")]).unwrap().direct_io, d);
            // Every word of the table's value grammar is one the interpreter takes.
            assert!(DirectIo::VALUES.split('|').any(|v| v == w), "{w}");
        }
        assert_eq!(Settings::default().direct_io, DirectIo::Never);
        assert_eq!(
            parsed(&["direct_io=sometimes"]).unwrap_err(),
            "-o direct_io=sometimes: expected one of auto, always, never"
        );
        assert_eq!(
            parsed(&["direct_io"]).unwrap_err(),
            "-o direct_io needs a value: direct_io=one of auto, always, never"
        );
    }

    #[test]
    fn later_options_win() {
        let s = parsed(&["threads=4", "threads=8"]).unwrap();
        assert_eq!(s.threads, 8);
    }

    #[test]
    fn help_lists_every_option_and_flag() {
        let h = help_text();
        for o in OPTIONS {
            assert!(h.contains(&usage(o)), "{}", o.name);
            if let Some(f) = o.flag {
                assert!(h.contains(&format!("--{f}")), "{f}");
            }
        }
    }
}
