//! The subcommands that work without FUSE (`ls`, `cat`, `verify`, `diff`, `export`, `warm`, `cache`), those
//! that list and stop mounts (`list`, `umount`), and what they share:
//! the escaping of keys and names in line-oriented output, and writing to a stdout that may be
//! closed early (`tfmount cat ... | head -c 10` ends quietly).
//!
//! The commands reach the rest of the crate through the engines of [`crate::model`] (a SOURCE
//! opened without a mount, verify, diff, values, the records they write); `warm` and `cache` also use the
//! disk cache's own functions (`source::remote::disk`) and the mount options; `list` and
//! `umount` read /proc and unmount through `mount::unmount`.

mod cache;
mod cat;
mod diff;
mod edits;
mod export;
mod list;
mod ls;
mod verify;
mod warm;

use std::os::unix::ffi::OsStrExt;

use crate::cli::Command;
use std::io;

use crate::model::lines::closed;

/// The command line `argv` (its first item the program's name): the mount form or a
/// subcommand, run; returns the process exit status. The binary and the Python module's
/// `tfmount` command are both this.
pub(crate) fn main(argv: Vec<std::ffi::OsString>) -> i32 {
    if crate::cli::is_subcommand(argv.get(1).map(|a| a.as_os_str())) {
        run(crate::cli::parse_cli(argv))
    } else {
        crate::mount::run(crate::cli::parse_mount(argv))
    }
}

/// Runs a subcommand; returns the process exit status.
pub(crate) fn run(cmd: Command) -> i32 {
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
        Command::Export(a) => export::run(&a),
        Command::Commit(a) => export::commit(a),
        Command::Edits(a) => edits::run(&a),
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

/// A path given on the command line, as bytes.
fn arg_bytes(s: &std::ffi::OsStr) -> &[u8] {
    s.as_bytes()
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
