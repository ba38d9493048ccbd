//! The subcommands that work without FUSE (`ls`, `cat`, `verify`, `diff`, `warm`, `cache`), those
//! that list and stop mounts (`list`, `umount`), and what they share:
//! the escaping of keys and names in line-oriented output, and writing to a stdout that may be
//! closed early (`tfmount cat ... | head -c 10` ends quietly).
//!
//! The commands reach the rest of the crate through [`model`]; `warm` and `cache` also use the
//! disk cache's own functions (`source::remote::disk`) and the mount options; `list` and
//! `umount` read /proc and unmount through `mount::unmount`.

mod cache;
mod cat;
pub mod diff;
mod list;
mod ls;
pub mod model;
pub(crate) mod values;
pub mod verify;
mod warm;

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;

use crate::cli::Command;

/// The command line `argv` (its first item the program's name): the mount form or a
/// subcommand, run; returns the process exit status. The binary and the Python module's
/// `tfmount` command are both this.
pub fn main(argv: Vec<std::ffi::OsString>) -> i32 {
    if crate::cli::is_subcommand(argv.get(1).map(|a| a.as_os_str())) {
        run(crate::cli::parse_cli(argv))
    } else {
        crate::mount::run(crate::cli::parse_mount(argv))
    }
}

/// Runs a subcommand; returns the process exit status.
pub fn run(cmd: Command) -> i32 {
    // The subcommands report what fails themselves, in their own lines; of the core's log,
    // only what nothing else says is shown: Keras datasets that are not served (`tfmount:
    // warning: ...`). `RUST_LOG` shows more, as for a mount.
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(
        "off,tfmount::formats::keras=warn,tfmount::probe::state=warn,\
                 tfmount::source::remote::disk=warn",
    ))
    .format(|f, r| {
        use std::io::Write as _;
        let level = match r.level() {
            log::Level::Error => "error",
            log::Level::Warn => "warning",
            log::Level::Info => "info",
            log::Level::Debug => "debug",
            log::Level::Trace => "trace",
        };
        writeln!(f, "tfmount: {level}: {}", r.args())
    })
    .try_init();
    let code = match cmd {
        Command::Mount(args) => crate::mount::run(args),
        Command::MountHelper(a) => crate::mount::helper::run(&a),
        Command::List(a) => list::run_list(&a),
        Command::Umount(a) => list::run_umount(&a),
        Command::Ls(a) => ls::run(&a),
        Command::Cat(a) => cat::run(&a),
        Command::Verify(a) => verify::run(&a),
        Command::Diff(a) => diff::run(&a),
        Command::Warm(a) => warm::run(&a),
        Command::Cache(c) => cache::run(&c),
        Command::Completions(a) => {
            match crate::cli::reference::completions(a.shell, &mut io::stdout()) {
                Ok(()) => 0,
                Err(e) if closed(&e) => 0,
                Err(e) => {
                    eprintln!("tfmount completions: {e}");
                    1
                }
            }
        }
        Command::Manpage => match crate::cli::reference::manpage(&mut io::stdout()) {
            Ok(()) => 0,
            Err(e) if closed(&e) => 0,
            Err(e) => {
                eprintln!("tfmount manpage: {e}");
                1
            }
        },
    };
    // What a disk cache (TFMOUNT_CACHE_DIR, `warm -o cache_dir`) still has to write.
    crate::source::remote::disk::flush_all(std::time::Duration::from_secs(30));
    code
}

/// Appends `raw` with `\` written `\\`, tab `\t` and newline `\n`; every other byte as is.
pub(crate) fn escape_into(out: &mut Vec<u8>, raw: &[u8]) {
    for &b in raw {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b => out.push(b),
        }
    }
}

pub fn escape(raw: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(raw.len());
    escape_into(&mut v, raw);
    v
}

/// A path given on the command line, as bytes.
fn arg_bytes(s: &std::ffi::OsStr) -> &[u8] {
    s.as_bytes()
}

/// Whether a write failed because the reader of stdout went away (EPIPE: Rust ignores SIGPIPE,
/// so the write returns the error instead of the process being killed).
fn closed(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// One value of an output record: bytes (a key, a path, words) or a number (`None`: unknown,
/// `?` in text, `null` in JSON).
#[derive(Clone, Copy)]
pub(crate) enum Val<'a> {
    Bytes(&'a [u8]),
    Num(Option<u64>),
    /// A float: in text as `text/` writes a float64 (`inf`, `nan`), in JSON a number (`null`
    /// when not finite).
    Float(f64),
}

/// Line-oriented output: buffered stdout as text (tab-separated fields, escaped) or as JSON
/// Lines (`--json`: one object per record, each field by its name, with `"type"` first), or
/// the records kept (for the Python module).
pub(crate) struct Lines {
    w: Option<io::BufWriter<io::StdoutLock<'static>>>,
    json: bool,
    line: Vec<u8>,
    /// The lines' fields, unescaped, when kept.
    kept: Vec<Vec<Vec<u8>>>,
}

impl Lines {
    fn new() -> Lines {
        Lines {
            w: Some(io::BufWriter::with_capacity(64 << 10, io::stdout().lock())),
            json: false,
            line: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// [`Lines::new`], or JSON Lines with `json`.
    fn to_stdout(json: bool) -> Lines {
        Lines {
            json,
            ..Lines::new()
        }
    }

    /// Lines kept in memory instead of written: [`Lines::into_pairs`] gives them.
    fn kept() -> Lines {
        Lines {
            w: None,
            json: false,
            line: Vec::new(),
            kept: Vec::new(),
        }
    }

    /// Whether lines are kept rather than written.
    fn keeps(&self) -> bool {
        self.w.is_none()
    }

    /// Whether records are written as JSON.
    fn json(&self) -> bool {
        self.json && self.w.is_some()
    }

    /// The kept lines of two fields each, as pairs (a missing field empty).
    fn into_pairs(self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.kept
            .into_iter()
            .map(|f| {
                let mut f = f.into_iter();
                let a = f.next().unwrap_or_default();
                (a, f.next().unwrap_or_default())
            })
            .collect()
    }

    /// Writes one record of type `kind`: in text, its values escaped, separated by tabs (`kind`
    /// and the names unused); in JSON, `{"type": kind, name: value, ...}` (see [`json_field`]).
    fn record(&mut self, kind: &str, fields: &[(&str, Val<'_>)]) -> io::Result<()> {
        let Some(w) = &mut self.w else {
            self.kept
                .push(fields.iter().map(|(_, v)| text_of(*v)).collect());
            return Ok(());
        };
        self.line.clear();
        if self.json {
            self.line.extend_from_slice(b"{\"type\":");
            json_string(&mut self.line, kind);
            for (name, v) in fields {
                json_field(&mut self.line, name, *v);
            }
            self.line.push(b'}');
        } else {
            for (i, (_, v)) in fields.iter().enumerate() {
                if i > 0 {
                    self.line.push(b'\t');
                }
                escape_into(&mut self.line, &text_of(*v));
            }
        }
        self.line.push(b'\n');
        w.write_all(&self.line)
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.w {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// A value's text: its bytes, or the number in decimal (`?` when unknown).
fn text_of(v: Val<'_>) -> Vec<u8> {
    match v {
        Val::Bytes(b) => b.to_vec(),
        Val::Num(Some(n)) => n.to_string().into_bytes(),
        Val::Num(None) => b"?".to_vec(),
        Val::Float(x) => {
            let mut out = Vec::new();
            crate::render::elem::write_f64(&mut out, x);
            out
        }
    }
}

fn json_string(out: &mut Vec<u8>, s: &str) {
    // Serializing a &str cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// `,"name":value`: a number (or `null`), or a string; bytes that are not UTF-8 come as their
/// text with U+FFFD for what is not, and beside it `"name_hex"`, the bytes in hex, so that no
/// key is lost.
fn json_field(out: &mut Vec<u8>, name: &str, v: Val<'_>) {
    out.push(b',');
    json_string(out, name);
    out.push(b':');
    match v {
        Val::Num(Some(n)) => out.extend_from_slice(n.to_string().as_bytes()),
        Val::Num(None) => out.extend_from_slice(b"null"),
        Val::Float(x) if !x.is_finite() => out.extend_from_slice(b"null"),
        Val::Float(x) => {
            let _ = serde_json::to_writer(&mut *out, &x);
        }
        Val::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => json_string(out, s),
            Err(_) => {
                json_string(out, &String::from_utf8_lossy(b));
                out.push(b',');
                json_string(out, &format!("{name}_hex"));
                out.push(b':');
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                json_string(out, &hex);
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_are_typed_and_keep_bytes_that_are_not_utf8() {
        let mut out = Vec::new();
        json_field(&mut out, "key", Val::Bytes(b"a/\"b\tc"));
        json_field(&mut out, "size", Val::Num(Some(12)));
        json_field(&mut out, "n", Val::Num(None));
        json_field(&mut out, "raw", Val::Bytes(b"x\xff"));
        assert_eq!(
            String::from_utf8(out).expect("utf8"),
            r#","key":"a/\"b\tc","size":12,"n":null,"raw":"x\u{fffd}","raw_hex":"78ff""#
                .replace("\\u{fffd}", "\u{fffd}")
        );
        assert_eq!(text_of(Val::Num(None)), b"?");
    }
}

/// Parses the command line `argv` (its first item the program's name) as `tfmount` would, and
/// runs nothing: the mount form or a subcommand, its flags and the number of its arguments, then
/// the mount options it is given (`-o` and the flags that stand for them, of a mount or of
/// `warm`) as the mount reads them, each known to [`crate::options::OPTIONS`] with a value of its grammar, and
/// `mount-helper`'s `-o`, which takes only its own two. `Err` is the message the command would
/// print; `--help` and `--version` are errors here too, since they print instead of running.
pub fn check_line(argv: &[std::ffi::OsString]) -> Result<(), String> {
    use clap::FromArgMatches;

    use crate::cli::Command;
    let sub = crate::cli::is_subcommand(argv.get(1).map(|a| a.as_os_str()));
    let cmd = if sub {
        crate::cli::cli_command()
    } else {
        crate::cli::mount_command()
    };
    let m = cmd
        .try_get_matches_from(argv)
        .map_err(|e| e.to_string().trim_end().to_string())?;
    let parsed = match m.subcommand() {
        _ if !sub => crate::cli::mount_args(&m).map(Command::Mount),
        Some(("mount", s)) => crate::cli::mount_args(s).map(Command::Mount),
        _ => crate::cli::Cli::from_arg_matches(&m).map(|c| c.command),
    };
    let options = match parsed.map_err(|e| e.to_string().trim_end().to_string())? {
        Command::Mount(a) => a.options,
        Command::Warm(a) => a.options,
        Command::MountHelper(h) => {
            return crate::mount::helper::parse_opts(&h.options)
                .map(|_| ())
                .map_err(|f| f.msg)
        }
        _ => return Ok(()),
    };
    let mut settings = crate::options::Settings::default();
    crate::options::apply(&mut settings, options.iter().map(String::as_str))
}

#[cfg(test)]
mod check_line_tests {
    use super::*;

    #[test]
    fn check_parses_as_the_command_does() {
        let check_words = |line: &str| {
            let argv: Vec<std::ffi::OsString> = line.split_whitespace().map(Into::into).collect();
            check_line(&argv)
        };
        for line in [
            "tfmount -f -o nocrc,cache_size=128M src mnt",
            "tfmount mount --no-crc --threads 4 s m",
            "tfmount ls -lR s a/b",
            "tfmount warm -o cache_dir=/c --threads 8 gs://b/x dense/ emb",
            "tfmount mount-helper -o allow_other --uid 1000 /m -- setpriv tfmount -f s /dev/fd/3",
            "tfmount umount -z /a /b",
            "tfmount cache clear /c gs://b/",
            "tfmount diff --values --atol 1e-6 a b",
        ] {
            assert_eq!(check_words(line), Ok(()), "{line}");
        }
        for (line, says) in [
            ("tfmount s", "MOUNTPOINT"),
            ("tfmount s m extra", "unexpected argument"),
            ("tfmount -o nocrc=1 s m", "takes no value"),
            ("tfmount mount -o bogus s m", "unknown mount option"),
            ("tfmount --threads 0 s m", "threads=0"),
            ("tfmount -o rw s m", "read-only"),
            ("tfmount ls -x s", "unexpected argument"),
            ("tfmount cat s", "required"),
            ("tfmount diff a", "required"),
            ("tfmount completions tcsh", "invalid value"),
            ("tfmount warm -o cache_max=lots s", "cache_max=lots"),
            (
                "tfmount mount-helper -o nocrc /m -- x",
                "unknown mount option",
            ),
            ("tfmount --help", "Usage"),
        ] {
            match check_words(line) {
                Ok(()) => panic!("{line}: accepted"),
                Err(e) => assert!(e.contains(says), "{line}: {e}"),
            }
        }
    }
}
