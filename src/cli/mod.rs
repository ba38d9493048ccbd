//! Command-line definitions: the mount form `tfmount [OPTIONS] SOURCE MOUNTPOINT` ([`Args`]) and
//! the subcommands (`mount`, `list`, `ls`, `verify`, `warm`, ...: [`Cli`], listed in [`SUBCOMMANDS`]),
//! chosen when the first argument names one (see [`is_subcommand`]). The mount options and
//! their flags come from one table, [`crate::options::OPTIONS`]; [`reference`] renders the man
//! page, shell completions and the reference in `docs/cli.md` from these definitions.

pub mod reference;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::options::{Value, OPTIONS};

/// What SOURCE can be, said once for the mount form and every subcommand: the kinds of source
/// that are not one checkpoint, then each format's own words (`Format::source`, in the table
/// of formats).
pub(crate) fn source_help() -> String {
    let list = crate::formats::sources(
        &[
            "A SavedModel directory",
            "a TF Serving base directory of numbered SavedModel versions (1/, 2/, ...: one directory each, latest -> the highest)",
            "a checkpoint directory (with a `checkpoint` state file, or *.index files)",
            "its state file",
            "a graph file (frozen GraphDef .pb/.pbtxt, or a Saver's .meta)",
        ],
        "or any of these as an s3://, gs://, http:// or https:// URL",
    );
    format!("{list}.")
}

/// The mount form's long description; its last paragraph is [`source_help`].
fn long_about() -> String {
    format!(
        "Mount a TensorFlow checkpoint or SavedModel as a read-only directory.\n\n\
Every tensor KEY becomes MOUNT/variables/KEY.bin (raw row-major little-endian bytes),\n\
KEY.shape, KEY.dtype and, for dtypes numpy holds natively, KEY.npy. Graphs appear under\n\
MOUNT/meta_graphs/TAGS/ (graph/NODE.pbtxt, functions/, signatures/, constants/), with\n\
MOUNT/graph, MOUNT/functions, ... linking to the default meta graph.\n\n\
SOURCE: {}",
        source_help()
    )
}

#[derive(Debug, Parser)]
#[command(
    name = "tfmount",
    version,
    about = "Mount a TensorFlow checkpoint or SavedModel as a read-only directory of tensor files",
    long_about = long_about()
)]
pub(crate) struct Args {
    #[arg(help = source_help())]
    pub(crate) source: PathBuf,

    #[arg(help = MOUNTPOINT_HELP, long_help = mountpoint_long_help(), required_unless_present = "nfs_serve")]
    pub(crate) mountpoint: Option<PathBuf>,

    /// Mount over NFSv3 instead of FUSE: a read-only NFS server of the tree on 127.0.0.1 at a
    /// free port, mounted with the system's NFS client (mount_nfs on macOS, mount -t nfs on
    /// Linux); the command run is said. For where FUSE is missing or broken (macOS, Windows,
    /// containers without /dev/fuse). Extended attributes are not served over NFSv3 (tfmount ls
    /// -l --json has them). docs/nfs.md.
    #[arg(long, conflicts_with = "nfs_serve")]
    pub(crate) nfs: bool,

    /// Only serve the tree over NFSv3 at [ADDR:]PORT (ADDR 127.0.0.1 unless given; another
    /// address with a warning: NFSv3 has no authentication worth the name), in the foreground,
    /// and print the command that mounts it on this system; Ctrl-C or SIGTERM stops it. No
    /// MOUNTPOINT. Any directory inside the tree can be mounted (127.0.0.1:/variables).
    #[arg(long, value_name = "[ADDR:]PORT", conflicts_with = "mountpoint")]
    pub(crate) nfs_serve: Option<String>,

    /// Stay in the foreground (log to stderr; once the mount serves, one line on stdout:
    /// `mounted SOURCE at MOUNTPOINT`; Ctrl-C or SIGTERM unmounts).
    #[arg(short, long)]
    pub(crate) foreground: bool,

    /// Mount options, comma-separated (see below); the flags after them win.
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub(crate) options: Vec<String>,

    /// The meta graph the top-level graph/, functions/, signatures/ ... links point to, as its
    /// comma-separated tag set, e.g. --tags serve,gpu (default: the only meta graph, else the
    /// one tagged exactly "serve", else the untagged one, as in TF Hub's TF1 modules; --tags ''
    /// picks the untagged one). A SavedModel with no meta graph of that tag set is refused,
    /// naming the tag sets it has.
    #[arg(long, value_name = "TAGS")]
    pub(crate) tags: Option<String>,

    /// In the background, append log lines to this file (default: discarded).
    #[arg(long, value_name = "PATH")]
    pub(crate) log_file: Option<PathBuf>,
}

const MOUNTPOINT_HELP: &str =
    "An existing empty directory to mount on (-o nonempty allows a non-empty one), \
or /dev/fd/N: a /dev/fuse descriptor another process mounted, served without mounting";

/// MOUNTPOINT's long help: the `/dev/fd/N` form, and which options are then the mounter's.
fn mountpoint_long_help() -> String {
    format!(
        "An existing empty directory to mount on (-o nonempty allows a non-empty one).\n\n\
Or /dev/fd/N (N a decimal number): descriptor N, a /dev/fuse descriptor that a privileged \
process opened and mounted (tfmount mount-helper, or mount -t fuse.tfmount -o fd=N,...) and \
passed on; tfmount then mounts nothing and needs no privilege: it serves that descriptor, and \
exits 0 when its mounter unmounts it. The mount-time options ({}) are then the mounter's: \
given here they are ignored, with a warning. See docs/containers.md.",
        crate::options::mount_time_names()
    )
}

/// The subcommand names: a first argument equal to one of these selects [`Cli`].
pub(crate) const SUBCOMMANDS: [&str; 16] = [
    "mount",
    "mount-helper",
    "list",
    "umount",
    "ls",
    "cat",
    "verify",
    "diff",
    "export",
    "commit",
    "edits",
    "warm",
    "cache",
    "completions",
    "manpage",
    "help",
];

/// Whether the first argument (after the program name) selects a subcommand. Anything else,
/// options included, is the mount form, so every command line that mounted before still does.
pub(crate) fn is_subcommand(first: Option<&OsStr>) -> bool {
    first.is_some_and(|a| SUBCOMMANDS.iter().any(|s| OsStr::new(s) == a))
}

/// The escaping rule, said in every line-oriented subcommand's help.
macro_rules! escapes {
    () => {
        "Keys and names containing a tab, a newline or a backslash are written with the escapes \\t, \\n and \\\\.\n\n"
    };
}

#[derive(Debug, Parser)]
#[command(
    name = "tfmount",
    version,
    about = "Mount, list, read, verify and compare TensorFlow checkpoints and SavedModels",
    after_help = "The mount form `tfmount [OPTIONS] SOURCE MOUNTPOINT` works without a subcommand \
(see `tfmount --help`). A SOURCE named like a subcommand (a directory called `ls`) is written ./ls."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

const LS_LONG: &str =
    "List the entries of PATH (default: the root) in the tree a mount of SOURCE would \
show, one name per line in readdir order. Symbolic links on the way to PATH are followed.";
const CAT_LONG: &str =
    "Write the bytes of each PATH of the tree a mount of SOURCE would show to stdout, \
byte-identical to reading the mounted file (.bin, .npy, .shape, .dtype, .pbtxt, signatures.txt, \
assets, ...). A file whose reading would fail with EIO in a mount (a CRC mismatch, a missing or \
truncated data file) gives a one-line error naming the tensor and the checkpoint instead.";
const VERIFY_LONG: &str =
    "Read every tensor of every checkpoint in SOURCE and check that every byte is there \
(data files present and long enough) and matches the CRC-32C stored in the index; index blocks \
that cannot be read are reported with the keys they hold. A V1 checkpoint stores no per-tensor \
CRC: every byte is read, checked against its table block's CRC-32C. One line per problem on stdout, \
KEY<TAB>REASON (KEY as TensorFlow names the tensor; in a checkpoint directory prefixed by the \
checkpoint's name and /); a progress bar on stderr when it is a terminal, and one summary line \
on stderr.";
const DIFF_LONG: &str = "List the tensors that differ between the checkpoints A and B (a prefix, the path \
of one of its files, a V1 checkpoint, a SavedModel, or a checkpoint directory: its latest checkpoint), \
sorted by key: \
A<TAB>KEY only in B (added), D<TAB>KEY only in A (deleted), T<TAB>KEY dtype or shape differ, \
M<TAB>KEY same dtype and shape, different bytes. By default the index decides: the same dtype, \
shape, size and stored CRC-32C mean equal, and no tensor data is read. Bytes are read only where \
the index cannot decide (partitioned tensors sliced differently; every tensor of a V1 checkpoint, \
which stores no CRC) or with --exact. --names matches tensors by the names names/ shows them by \
instead of keys (a .keras file against the legacy .h5 of the same model). --values says how much \
each changed tensor's values changed; a quantized tensor (TFLite) is compared by its dequantized \
float32 values against a float tensor of the same shape.";

const EXPORT_LONG: &str = "Write a new checkpoint at OUT from the tensors of SOURCE (any SOURCE \
tfmount reads: its one checkpoint, a SavedModel's variables, a checkpoint directory's latest), as \
variables/ serves them, with the edits given applied in their order: --keep and --drop select by \
key (globs: * and ? within a path component, ** across), --weights-only keeps what \
weights.safetensors holds (no optimizer slots or state, no bookkeeping), --rename replaces the \
first match of a regular expression in each key, --cast converts float tensors as tf.cast does, \
--set gives a tensor new values (an .npy file's, another checkpoint's tensor). --to tf writes a TF V2 checkpoint \
(OUT.index, OUT.data-NNNNN-of-MMMMM) that TensorFlow reads. Every tensor is checked against what \
SOURCE stores to check it by (its CRC-32C) and a damaged one stops the export, naming it. \
Nothing is at OUT until it is whole: the files are written under temporary names beside it, \
synced, read back against their CRC-32C, then renamed, the .index last; a killed export leaves \
only temporaries, which the next export there removes. A TF2 checkpoint's object graph is edited \
to follow: dropped tensors leave their objects (an optimizer dropped whole leaves the graph), \
renames must move objects (an edge renamed: ^model/enc/=model/encoder/); what it cannot follow \
is refused, naming the key, unless --no-object-graph (a name-keyed checkpoint, which \
tf.train.load_checkpoint reads and tf.train.Checkpoint does not restore). docs/export.md has \
recipes.";

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Mount SOURCE on MOUNTPOINT (the same as `tfmount [OPTIONS] SOURCE MOUNTPOINT`).
    #[command(after_help = "EXAMPLES:\n  tfmount mount saved_model_dir /mnt/m\n  \
tfmount mount -f -o nocrc train/ckpt-42 /mnt/c\n\n\
The mount form without `mount` is the same; `tfmount --help` lists the exit codes.")]
    Mount(Args),
    /// Mount /dev/fuse on MOUNTPOINT (privileged) and run COMMAND with the descriptor, to serve it unprivileged.
    #[command(name = "mount-helper", long_about = HELPER_LONG)]
    MountHelper(HelperArgs),
    /// List the active tfmount mounts: mount point, source, daemon pid, options.
    #[command(long_about = LIST_LONG)]
    List(ListArgs),
    /// Unmount tfmount mounts and wait for their daemons to exit.
    #[command(long_about = UMOUNT_LONG)]
    Umount(UmountArgs),
    /// List the tree a mount of SOURCE would show, without mounting.
    #[command(long_about = LS_LONG)]
    Ls(LsArgs),
    /// Write files of the tree a mount of SOURCE would show to stdout, without mounting.
    #[command(long_about = CAT_LONG)]
    Cat(CatArgs),
    /// Check every tensor of every checkpoint in SOURCE against its stored CRC-32C.
    #[command(long_about = VERIFY_LONG)]
    Verify(VerifyArgs),
    /// List the tensors that differ between two checkpoints.
    #[command(long_about = DIFF_LONG)]
    Diff(DiffArgs),
    /// Write a new checkpoint from SOURCE, with tensors kept, dropped or renamed.
    #[command(long_about = EXPORT_LONG)]
    Export(ExportArgs),
    /// Write the edited model of an editable mount (-o edit) as a new checkpoint.
    #[command(long_about = COMMIT_LONG, after_help = COMMIT_AFTER)]
    Commit(ExportArgs),
    /// List (or discard) the pending edits of an editable mount or edits directory.
    #[command(long_about = EDITS_LONG)]
    Edits(EditsArgs),
    /// Fetch an object-storage checkpoint (or some of its tensors) into the disk cache.
    #[command(long_about = WARM_LONG)]
    Warm(WarmArgs),
    /// Show or empty a disk cache (cache_dir).
    #[command(subcommand)]
    Cache(CacheCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "EXAMPLES:\n  tfmount completions bash > ~/.local/share/bash-completion/completions/tfmount\n  \
tfmount completions zsh > \"${fpath[1]}/_tfmount\"\n  \
tfmount completions fish > ~/.config/fish/completions/tfmount.fish"
    )]
    Completions(CompletionsArgs),
    /// Print the manual page (roff): `tfmount manpage | man -l -`.
    #[command(after_help = "EXAMPLES:\n  tfmount manpage | man -l -\n  \
tfmount manpage > /usr/local/share/man/man1/tfmount.1")]
    Manpage,
}

const COMMIT_LONG: &str = "Write the model an editable mount (tfmount -o edit) shows at OUT, as \
export writes it: MNT is the mount point (or its edits directory, DIR of -o edit=DIR, with or without \
the mount), and its source and edits are taken from there. The same as tfmount export --edits DIR \
SOURCE OUT, with all of export's options (applied after the mount's edits) and guarantees: nothing \
at OUT until it is whole, every tensor checked against what SOURCE stores, a damaged one refused. \
The edits stay pending: tfmount edits --discard MNT drops them (docs/edit.md).";

const COMMIT_AFTER: &str = "EXAMPLES:\n  tfmount commit /mnt/m out/ckpt-1000\n  \
tfmount commit --to safetensors /mnt/m model.safetensors\n  \
tfmount commit --dry-run /mnt/m out/ckpt      # the plan: D, R, S lines\n\n\
EXIT CODES:\n  0 written   1 refused (a damaged tensor, an edit that cannot be written)   2 usage error   \
3 SOURCE unusable";

const EDITS_LONG: &str = "List the edits an editable mount (tfmount -o edit) holds and has not \
written yet, tensor by tensor, as export --dry-run prints a plan: D KEY (dropped), R OLD -> NEW \
(renamed), S KEY (shape [..] dtype) (new values, of a tensor there or a new one), in the source's \
key order, then the new tensors; --json: one object per line (docs/edit.md). TARGET is the mount \
point or the edits directory (DIR of -o edit=DIR). --discard drops the edits of the tensors KEY... \
(each a key as the mount shows it now, or as the source has it; a directory's key drops \
everything under it), or all of them without KEY; on a mount it is the mount that discards, at \
once. Exit status 0, 1 when a KEY names no edit, 2 usage, 3 TARGET unusable.";

const LIST_LONG: &str = "List the tfmount mounts this process sees (/proc/self/mountinfo): one \
line per mount, MOUNTPOINT<TAB>SOURCE<TAB>PID<TAB>OPTIONS<TAB>CACHE, after a header line; nothing at all when \
there is none (as mount -t prints nothing), exit status 0 either way. A mount is tfmount's when its \
type is fuse.tfmount (tfmount mount-helper, mount -t fuse.tfmount), or when it is a plain fuse mount \
that a running tfmount process names as its MOUNTPOINT (tfmount mounting itself: the kernel shows \
its type as fuse). SOURCE is the source as the mount recorded it (a local source's canonical path, \
or its URL; tfmount for a mount-helper's mount). PID is the daemon serving the mount, found from \
the command lines in /proc/*/cmdline (a tfmount process whose MOUNTPOINT, resolved against its \
working directory, is the mount point, not the watchdog it forks; or the tfmount child serving \
/dev/fd/N of the tfmount mount-helper that mounted it): - when it cannot be told (another user's \
process, a descriptor passed on some other way). OPTIONS are the daemon's -o options and the flags that stand for them, \
comma-separated (- when none or unknown). CACHE is the disk cache directory an object-storage \
SOURCE is read through (its cache_dir option, else the default from the daemon's environment: \
TFMOUNT_CACHE_DIR, XDG_CACHE_HOME/tfmount, ~/.cache/tfmount), none when it has none, - for a local \
SOURCE or when the daemon's environment cannot be read.";

const UMOUNT_LONG: &str = "Unmount each MOUNTPOINT, a tfmount mount, as fusermount3 -u does (-z: \
detach it now, as fusermount3 -u -z: files still open on it keep working, the daemon exits when \
the last is closed, and umount does not wait for it), then wait up to 10 s for its daemon to exit. A path that is not a tfmount mount (not a mount point, or another file \
system) is refused, naming what it is. A busy mount (files or directories open on it) stays \
mounted, with a message; -z detaches it anyway.";

#[derive(Debug, clap::Args)]
#[command(after_help = "EXAMPLES:\n  tfmount list\n  tfmount list --json | jq -r .mountpoint")]
pub(crate) struct ListArgs {
    /// One JSON object per mount (JSON Lines, no header; schema: docs/cli.md).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "EXAMPLES:\n  tfmount umount /mnt/m\n  tfmount umount -z /mnt/a /mnt/b\n\n\
EXIT CODES:\n  0 every MOUNTPOINT unmounted and its daemon gone   1 busy, unmount failed, or a daemon \
still running after 10 s   2 usage error   4 a MOUNTPOINT that is not a tfmount mount"
)]
pub(crate) struct UmountArgs {
    /// Detach lazily (umount -l): the mount disappears now; files open on it stay readable until
    /// closed, then the daemon exits (not waited for).
    #[arg(short = 'z', long)]
    pub(crate) lazy: bool,
    /// tfmount mount points.
    #[arg(required = true, value_name = "MOUNTPOINT")]
    pub(crate) mountpoints: Vec<PathBuf>,
}

const HELPER_LONG: &str = "The privileged half of a mount whose daemon runs without the privilege \
to mount (a container without CAP_SYS_ADMIN). Opens /dev/fuse, mounts it on MOUNTPOINT (mount(2): \
type fuse.tfmount, read-only, nosuid, nodev, default_permissions; user_id and group_id --uid and \
--gid), then runs COMMAND with the descriptor open as number --fd (default 3; also in the \
environment as TFMOUNT_FUSE_FD). COMMAND drops privileges and serves it: \
`setpriv ... tfmount -f SOURCE /dev/fd/3`.\n\n\
While COMMAND runs the helper waits: SIGTERM, SIGINT or SIGHUP unmounts MOUNTPOINT, which ends \
the daemon's session (it exits 0), and is passed on to COMMAND if it still runs 2 s later; if COMMAND fails (a status other than 0, or killed) the helper \
removes the mount, so no dead mount is left. The helper exits with COMMAND's status (128+N when \
killed by signal N, 127 when it cannot be started). A COMMAND that exits 0 while the mount stays \
(tfmount without -f returns once it serves) leaves the mount; it ends when a privileged process \
unmounts MOUNTPOINT (umount MOUNTPOINT).";

#[derive(Debug, clap::Args)]
#[command(after_help = "EXAMPLES:\n  \
tfmount mount-helper --uid 1000 --gid 1000 /mnt/m -- setpriv --reuid 1000 --regid 1000 \
--clear-groups --inh-caps=-all --bounding-set=-all tfmount -f model/ /dev/fd/3\n  \
tfmount mount-helper -o allow_other /mnt/m -- capsh --drop=cap_sys_admin -- -c \
'exec tfmount model/ /dev/fd/$TFMOUNT_FUSE_FD'\n  \
umount /mnt/m                          # ends the daemon\n\n\
EXIT CODES:\n  COMMAND's status; else 2 usage error   4 bad MOUNTPOINT   5 cannot open /dev/fuse or \
mount (no CAP_SYS_ADMIN)   127 COMMAND cannot be started")]
pub(crate) struct HelperArgs {
    /// Mount options, comma-separated: allow_other (every user may read the mount), nonempty
    /// (mount on a non-empty directory).
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub(crate) options: Vec<String>,
    /// The user the mount belongs to (user_id): without allow_other the kernel lets only this
    /// user use it (default: the helper's own).
    #[arg(long, value_name = "UID")]
    pub(crate) uid: Option<u32>,
    /// The group of the mount (group_id) (default: the helper's own).
    #[arg(long, value_name = "GID")]
    pub(crate) gid: Option<u32>,
    /// The descriptor number COMMAND gets /dev/fuse as.
    #[arg(long, value_name = "N", default_value_t = 3,
          value_parser = clap::value_parser!(i32).range(3..=1023))]
    pub(crate) fd: i32,
    /// An existing empty directory to mount on.
    pub(crate) mountpoint: PathBuf,
    /// The command that serves the mount, after --, e.g. tfmount -f SOURCE /dev/fd/3 (after
    /// dropping privileges).
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

const WARM_LONG: &str = "Fetch every tensor of SOURCE (an s3://, gs:// or http(s):// checkpoint, \
SavedModel, checkpoint directory or any other source tfmount mounts), or only the tensors whose key \
starts with one of the KEYs given, into the disk cache (-o cache_dir=DIR, else the default: \
TFMOUNT_CACHE_DIR, $XDG_CACHE_HOME/tfmount, ~/.cache/tfmount), \
reading in parallel and checking every byte against the CRC-32C stored with it, as verify does. A \
mount, ls, cat, verify or diff of SOURCE with the same cache then reads those bytes from local disk. \
Interrupted, it resumes: what is cached is read back from disk (and checked), not fetched again. \
Problems are printed as verify prints them; a progress bar (bytes, rate, time left) goes to stderr \
when it is a terminal, one summary line always.";

#[derive(Debug, clap::Args)]
#[command(
    after_help = "EXAMPLES:\n  tfmount warm -o cache_dir=/local/cache gs://bucket/run/ckpt-1000\n  \
export TFMOUNT_CACHE_DIR=/local/cache\n  \
tfmount warm gs://bucket/run/ckpt-1000 && tfmount gs://bucket/run/ckpt-1000 /mnt/m\n  \
tfmount warm s3://b/model/ dense/ embedding     # only the tensors under these keys\n\n\
EXIT CODES:\n  0 every byte of the chosen tensors is in the cache and checked   1 problems found, \
or bytes that could not be kept (cache_max too small, disk full)   2 usage error (no cache_dir)   \
3 SOURCE unusable"
)]
pub(crate) struct WarmArgs {
    /// Mount options for object storage: cache_dir, cache_max, remote_timeout, remote_cache,
    /// anonymous (see `tfmount --help`); others are accepted and change nothing here.
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub(crate) options: Vec<String>,
    /// Tensors fetched at once (default: 8, or the number of CPUs if more).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) threads: Option<u16>,
    #[arg(help = source_help())]
    pub(crate) source: PathBuf,
    /// Fetch only the tensors whose key (as verify prints it) starts with one of these.
    pub(crate) keys: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum CacheCommand {
    /// List what a disk cache holds: one object version per line, largest first.
    #[command(
        after_help = "OUTPUT:\n  CACHED_BYTES<TAB>OBJECT_SIZE<TAB>PIECES<TAB>LAST_USED<TAB>URL<TAB>IDENTITY, \
LAST_USED in seconds since 1970 (- when nothing is cached), IDENTITY the size and ETag (or time) \
the pieces belong to; one summary line on stderr.\n\nEXAMPLES:\n  tfmount cache ls /local/cache\n  \
tfmount cache ls | sort -n | tail"
    )]
    Ls(CacheDirArgs),
    /// Remove what a disk cache holds (everything, or the objects whose URL starts with PREFIX).
    #[command(
        after_help = "Safe while mounts use the cache: they fetch again what they need.\n\n\
EXAMPLES:\n  tfmount cache clear /local/cache\n  tfmount cache clear /local/cache gs://bucket/old-run/"
    )]
    Clear(CacheClearArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct CacheDirArgs {
    /// The cache_dir (default: TFMOUNT_CACHE_DIR, else $XDG_CACHE_HOME/tfmount, else
    /// ~/.cache/tfmount).
    pub(crate) dir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CacheClearArgs {
    /// The cache_dir (default: TFMOUNT_CACHE_DIR, else $XDG_CACHE_HOME/tfmount, else
    /// ~/.cache/tfmount).
    pub(crate) dir: Option<PathBuf>,
    /// Only the objects whose URL starts with this.
    pub(crate) prefix: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = concat!(
        "OUTPUT:\n  NAME per line; with -l: TYPE<TAB>SIZE<TAB>NAME, TYPE one of d (directory), \
f (file), l (symbolic link, followed by <TAB>TARGET); with -R: paths relative to PATH.\n\n",
        escapes!(),
        "EXAMPLES:\n  tfmount ls model/ variables/dense\n  tfmount ls -l train/ckpt-42\n  \
tfmount ls -R train/ latest/variables | grep kernel\n\n",
        "EXIT CODES:\n  0 listed   1 PATH missing or unreadable   2 usage error   3 SOURCE unusable\n\n\
SOURCE is anything tfmount mounts. A SOURCE named like a subcommand is written ./ls."
    )
)]
pub(crate) struct LsArgs {
    /// Add the type and size of each entry.
    #[arg(short = 'l')]
    pub(crate) long: bool,
    /// List subdirectories recursively (paths relative to PATH).
    #[arg(short = 'R')]
    pub(crate) recursive: bool,
    /// One JSON object per entry (JSON Lines), always with its type and size (schema: docs/cli.md).
    #[arg(long)]
    pub(crate) json: bool,
    #[arg(help = source_help())]
    pub(crate) source: PathBuf,
    /// A directory (or file) of the tree, relative to its root.
    pub(crate) path: Option<OsString>,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "EXAMPLES:\n  tfmount cat model/ variables/dense/kernel.shape\n  \
tfmount cat train/ckpt-42 variables/dense/kernel.npy > kernel.npy\n  \
tfmount cat train/ latest/variables/global_step.bin | od -An -td8\n\n\
EXIT CODES:\n  0 every file written   1 a PATH missing, a directory, or unreadable (EIO)\n  \
2 usage error   3 SOURCE unusable\n\n\
A SOURCE named like a subcommand is written ./ls."
)]
pub(crate) struct CatArgs {
    #[arg(help = source_help())]
    pub(crate) source: PathBuf,
    /// Files of the tree, relative to its root.
    #[arg(required = true)]
    pub(crate) paths: Vec<OsString>,
}

/// One edit of `export`, in command-line order.
#[derive(Debug, Clone)]
pub(crate) enum ExportEdit {
    Keep(String),
    Drop(String),
    WeightsOnly,
    Rename(String),
    Cast(String),
    Set(String),
}

/// What `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ExportTo {
    /// A TF V2 checkpoint (OUT.index, OUT.data-*).
    Tf,
    /// One .safetensors file (every numeric tensor; __metadata__ names the source).
    Safetensors,
    /// A SavedModel directory: SOURCE's (a SavedModel) graph, assets and fingerprint as they
    /// are, its variables rewritten; edits its graph cannot follow are refused.
    Savedmodel,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "EXAMPLES:\n  tfmount export --weights-only train/ckpt-42 serve/ckpt\n  \
tfmount export --rename '^model/enc/=model/encoder/' old/ckpt-9 new/ckpt\n  \
tfmount export --rename '^enc/=encoder/' --dry-run tf1/model.ckpt out/model.ckpt\n  \
tfmount export model.weights.h5 out/ckpt         # Keras weights as a TF checkpoint\n  \
tfmount export --weights-only train/ckpt-42 weights.safetensors\n  \
tfmount export --set 'emb/.ATTRIBUTES/VARIABLE_VALUE=emb.npy' model/ patched/   # a SavedModel\n  \
tfmount export --variables-from train/ckpt-42 model/ model-42/\n\n\
EXIT CODES:\n  0 written (or planned, --dry-run)   1 refused (an edit, a damaged tensor, OUT exists, \
a write failed: nothing left at OUT)   2 usage error   3 SOURCE unusable\n\n\
A SOURCE named like a subcommand is written ./ls."
)]
pub(crate) struct ExportArgs {
    #[arg(help = source_help())]
    pub(crate) source: PathBuf,
    /// What to write: a checkpoint prefix (OUT.index, OUT.data-*), a .safetensors file, or a
    /// SavedModel directory.
    pub(crate) out: PathBuf,
    /// What to write (default: safetensors for an OUT ending .safetensors, else savedmodel for a
    /// SavedModel SOURCE, else tf).
    #[arg(long, value_enum)]
    pub(crate) to: Option<ExportTo>,
    /// Take every variable's values from the checkpoint CKPT (any SOURCE kind), before the
    /// edits: by key (or the same key under one object path of CKPT, such as model/), or by
    /// names/ names with --names; every variable matched once, with its dtype and shape.
    #[arg(long, value_name = "CKPT")]
    pub(crate) variables_from: Option<PathBuf>,
    /// --variables-from matches by names/ names (a checkpoint without names/ by its keys).
    #[arg(long, requires = "variables_from")]
    pub(crate) names: bool,
    /// Keep only the tensors whose key matches GLOB (of those still selected).
    #[arg(long, value_name = "GLOB", action = ArgAction::Append)]
    pub(crate) keep: Vec<String>,
    /// Leave out the tensors whose key matches GLOB.
    #[arg(long, value_name = "GLOB", action = ArgAction::Append)]
    pub(crate) drop: Vec<String>,
    /// Keep only the model's weights: no optimizer slots or state, no bookkeeping.
    #[arg(long)]
    pub(crate) weights_only: bool,
    /// Replace the first match of REGEX in each key (Rust regex syntax; $1, ${name} for groups).
    #[arg(long, value_name = "REGEX=REPLACEMENT", action = ArgAction::Append)]
    pub(crate) rename: Vec<String>,
    /// Convert float tensors (float32, float64, float16, bfloat16) whose key matches GLOB (all
    /// without one) to DTYPE, as tf.cast does: round to nearest, ties to even.
    #[arg(long, value_name = "DTYPE[:GLOB]", action = ArgAction::Append)]
    pub(crate) cast: Vec<String>,
    /// New values for the tensor at KEY (as named so far; a new tensor if there is none): an .npy
    /// file's array, or a tensor of another SOURCE (SOURCE:KEY). Its shape and dtype may change.
    #[arg(long, value_name = "KEY=FILE.npy|KEY=SOURCE:KEY", action = ArgAction::Append)]
    pub(crate) set: Vec<String>,
    /// Leave a TF2 checkpoint's object graph out: a name-keyed checkpoint (TF1 style).
    #[arg(long)]
    pub(crate) no_object_graph: bool,
    /// Bytes per data file at most (K, M, G suffixes); a larger tensor has a file of its own.
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    pub(crate) shard_size: Option<u64>,
    /// Replace a checkpoint already at OUT.
    #[arg(long)]
    pub(crate) force: bool,
    /// Print the plan (D KEY, R OLD -> NEW, C KEY FROM -> TO, S KEY (shape, dtype)) and what
    /// would be written; write nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// The plan's steps and the summary as JSON Lines (schema: docs/export.md).
    #[arg(long)]
    pub(crate) json: bool,
    /// Apply the edits kept in DIR (an editable mount's, -o edit=DIR) first, then the others.
    #[arg(long = "edits", value_name = "DIR")]
    pub(crate) edits_dir: Option<PathBuf>,
    /// The edits in command-line order (from the matches' indices).
    #[arg(skip)]
    pub(crate) edits: Vec<ExportEdit>,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = "EXAMPLES:\n  tfmount edits /mnt/m\n  tfmount edits --json ~/.cache/tfmount/edits/ckpt-1000\n  \
tfmount edits --discard /mnt/m variables/model/head/w"
)]
pub(crate) struct EditsArgs {
    /// One JSON object per edit (JSON Lines).
    #[arg(long)]
    pub(crate) json: bool,
    /// Drop the edits of KEY... (all without KEY) instead of listing them.
    #[arg(long)]
    pub(crate) discard: bool,
    /// The editable mount's mount point, or its edits directory.
    pub(crate) target: PathBuf,
    /// Keys whose edits --discard drops.
    #[arg(requires = "discard")]
    pub(crate) keys: Vec<String>,
}

/// A size: bytes, or a number with K, M, G (powers of 1024).
fn size_arg(s: &str) -> Result<u64, String> {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{s:?} is not a size (bytes, or a number with K, M or G)"))
}

/// `export`'s edits in the order they were given.
fn export_edits(m: &ArgMatches) -> Vec<ExportEdit> {
    let mut v: Vec<(usize, ExportEdit)> = Vec::new();
    let mut take = |id: &str, make: &dyn Fn(String) -> ExportEdit| {
        if let (Some(idx), Some(vals)) = (m.indices_of(id), m.get_many::<String>(id)) {
            for (i, val) in idx.zip(vals) {
                v.push((i, make(val.clone())));
            }
        }
    };
    take("keep", &ExportEdit::Keep);
    take("drop", &ExportEdit::Drop);
    take("rename", &ExportEdit::Rename);
    take("cast", &ExportEdit::Cast);
    take("set", &ExportEdit::Set);
    if let Some(i) = m.index_of("weights_only") {
        if m.get_flag("weights_only") {
            v.push((i, ExportEdit::WeightsOnly));
        }
    }
    v.sort_by_key(|(i, _)| *i);
    v.into_iter().map(|(_, e)| e).collect()
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = concat!(
        "EXAMPLES:\n  tfmount verify train/ckpt-42\n  tfmount verify saved_model_dir/ && echo intact\n  \
tfmount verify train/ | cut -f1      # the damaged tensors\n\n",
        escapes!(),
        "EXIT CODES:\n  0 every tensor intact   1 problems found   2 usage error   3 SOURCE unusable\n\n\
A SOURCE named like a subcommand is written ./ls."
    )
)]
pub(crate) struct VerifyArgs {
    #[arg(help = source_help())]
    pub(crate) source: PathBuf,
    /// Threads reading and checking (default: the number of CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub(crate) threads: Option<u16>,
    /// One JSON object per problem, then a summary object (JSON Lines; schema: docs/cli.md).
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, clap::Args)]
#[command(
    after_help = concat!(
        "EXAMPLES:\n  tfmount diff train/ckpt-1000 train/ckpt-2000\n  \
tfmount diff --stats old_model/ new_model/ | grep -c '^M'\n  \
tfmount diff -s --exact a/ckpt b/ckpt\n\n",
        escapes!(),
        "EXIT CODES (as diff(1)):\n  0 no differences   1 differences   2 trouble (usage, unusable source, \
unreadable index)\n\nA SOURCE named like a subcommand is written ./ls."
    )
)]
pub(crate) struct DiffArgs {
    /// Also print equal tensors, as =<TAB>KEY.
    #[arg(short = 's', long = "report-identical")]
    pub(crate) same: bool,
    /// Compare the bytes of every tensor present in both, whatever the index says.
    #[arg(long)]
    pub(crate) exact: bool,
    /// Print one line of counts on stderr: tensors, how each was decided, data bytes read.
    #[arg(long)]
    pub(crate) stats: bool,
    /// One JSON object per changed tensor, then a summary object (JSON Lines; schema: docs/cli.md).
    #[arg(long)]
    pub(crate) json: bool,
    /// How much each changed tensor's values changed: max |a-b|, max |a-b|/|b|, RMS of a-b, how
    /// many elements differ and the first of them (numbers compared as numbers, B the reference).
    #[arg(long)]
    pub(crate) values: bool,
    /// With --values: elements with |a-b| <= ATOL + RTOL*|b| are equal (numpy's isclose), and a
    /// tensor whose elements all are is reported equal.
    #[arg(long, value_name = "ATOL", value_parser = non_negative)]
    pub(crate) atol: Option<f64>,
    /// With --values: the relative tolerance (see --atol).
    #[arg(long, value_name = "RTOL", value_parser = non_negative)]
    pub(crate) rtol: Option<f64>,
    /// Match tensors by the names names/ shows them by (in every format that has them, across
    /// formats: a .keras against a legacy .h5 of the same model), not by key; tensors without a
    /// name are not compared.
    #[arg(long)]
    pub(crate) names: bool,
    /// The old checkpoint.
    pub(crate) a: PathBuf,
    /// The new checkpoint.
    pub(crate) b: PathBuf,
}

/// Adds what [`OPTIONS`] defines to the mount form's command: the `-o` help listing every
/// option, and the long flags that stand for options (`--no-crc`, `--cache-size`, ...).
pub(crate) fn with_mount_options(cmd: clap::Command) -> clap::Command {
    let mut cmd = cmd.mut_arg("options", |a| a.long_help(crate::options::help_text()));
    for o in OPTIONS {
        let Some(flag) = o.flag else { continue };
        let mut help = format!("Same as -o {}: {}", crate::options::usage(o), o.help);
        if !o.default.is_empty() {
            help.push_str(&format!(" Default: {}.", o.default));
        }
        let arg = Arg::new(o.name).long(flag).help(help);
        cmd = cmd.arg(match o.value.placeholder() {
            None => arg.action(ArgAction::SetTrue),
            Some(p) => arg.value_name(p).action(ArgAction::Set),
        });
    }
    cmd
}

/// [`Args`] from matches of [`with_mount_options`]'s command: the option flags become `-o`
/// entries after the `-o` arguments, so they win.
impl Args {
    /// MOUNTPOINT (empty with `--nfs-serve`, which has none).
    pub(crate) fn mountpoint(&self) -> &Path {
        self.mountpoint.as_deref().unwrap_or(Path::new(""))
    }
}

pub(crate) fn mount_args(m: &ArgMatches) -> Result<Args, clap::Error> {
    let mut a = Args::from_arg_matches(m)?;
    for o in OPTIONS.iter().filter(|o| o.flag.is_some()) {
        match o.value {
            Value::None => {
                if m.get_flag(o.name) {
                    a.options.push(o.name.to_string());
                }
            }
            _ => {
                if let Some(v) = m.get_one::<String>(o.name) {
                    a.options.push(format!("{}={v}", o.name));
                }
            }
        }
    }
    Ok(a)
}

/// The mount form's examples.
const MOUNT_EXAMPLES: &str = "EXAMPLES:\n  \
tfmount saved_model_dir /mnt/m && ls /mnt/m/variables\n  \
tfmount -f -o nocrc,cache_size=128M train/ckpt-42 /mnt/c\n  \
tfmount s3://bucket/run1/ckpt-42 /mnt/s3\n  \
tfmount --nfs saved_model_dir /mnt/m     # without FUSE (macOS): over NFS\n  \
tfmount umount /mnt/m                  # unmount (or fusermount3 -u /mnt/m)";

const MOUNT_EXIT_CODES: &str =
    "EXIT CODES:\n  0 mounted (or clean unmount in -f)   1 runtime failure   \
2 usage error\n  3 SOURCE missing or not a checkpoint   4 bad MOUNTPOINT   5 FUSE unavailable\n  \
(--nfs: the NFS mount failed)";

/// The widest line of the SUBCOMMANDS table (and of the docs' rendering of `--help`).
pub(crate) const HELP_WIDTH: usize = 100;

/// The mount form's text after its options: examples, the SUBCOMMANDS table, exit codes.
fn mount_after_help() -> String {
    format!(
        "{MOUNT_EXAMPLES}\n\n{}\
A SOURCE named like a subcommand (a directory called `ls`) is written ./ls.\n\n{MOUNT_EXIT_CODES}",
        subcommands_table(&Cli::command())
    )
}

/// The SUBCOMMANDS table of `tfmount --help`, made from the subcommands `cli` defines: each
/// one's name and what it does (its `about`, filled to [`HELP_WIDTH`] columns), then its first
/// example that fits the width (from the EXAMPLES of its own help; a subcommand with
/// subcommands, `cache`, its first one's). `mount`'s example is its synopsis.
pub(crate) fn subcommands_table(cli: &clap::Command) -> String {
    let subs: Vec<&clap::Command> = cli
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        .collect();
    let col = 2 + subs.iter().map(|s| s.get_name().len()).max().unwrap_or(0) + 2;
    let mut out = String::from(
        "SUBCOMMANDS (all but mount and mount-helper need no FUSE; `tfmount SUBCOMMAND --help` \
for each):\n",
    );
    for s in subs {
        let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
        let about = about.trim_end_matches('.');
        let mut line = format!("  {:<w$}", s.get_name(), w = col - 2);
        for word in about.split_whitespace() {
            if line.len() > col && line.len() + 1 + word.len() > HELP_WIDTH {
                out.push_str(line.trim_end());
                out.push('\n');
                line = " ".repeat(col);
            }
            if line.len() > col {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push_str(line.trim_end());
        out.push('\n');
        let example = if s.get_name() == "mount" {
            Some("tfmount mount [OPTIONS] SOURCE MOUNTPOINT".to_string())
        } else {
            first_example(s, HELP_WIDTH - col - 2)
        };
        if let Some(e) = example {
            out.push_str(&format!("{}  {e}\n", " ".repeat(col)));
        }
    }
    out
}

/// The first example in `cmd`'s help (or its first subcommand's), shortened to `width`
/// columns (see [`shortened`]).
fn first_example(cmd: &clap::Command, width: usize) -> Option<String> {
    let own = cmd.get_after_help().map(|h| h.to_string()).and_then(|h| {
        let (_, examples) = h.split_once("EXAMPLES:\n")?;
        let first = examples.lines().next()?.trim();
        first
            .starts_with("tfmount ")
            .then(|| shortened(first, width))
    });
    own.or_else(|| {
        cmd.get_subcommands()
            .find(|s| s.get_name() != "help")
            .and_then(|s| first_example(s, width))
    })
}

/// `line` if it is at most `width` columns wide, else its first words and its last ones with
/// ` ... ` between them (`tfmount mount-helper --uid ... tfmount -f model/ /dev/fd/3`). Where
/// the line has a `--`, the first words run up to it, so that `...` stands for arguments of
/// the command after it and the line still parses as the program's.
fn shortened(line: &str, width: usize) -> String {
    if line.len() <= width {
        return line.to_string();
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut tail = 0;
    let mut tail_len = 0;
    while tail < words.len() && tail_len + words[words.len() - 1 - tail].len() < width / 2 {
        tail_len += words[words.len() - 1 - tail].len() + 1;
        tail += 1;
    }
    let mut head = 0;
    let mut head_len = 0;
    while head + tail < words.len() && head_len + words[head].len() + 1 + 4 + tail_len <= width {
        head_len += words[head].len() + 1;
        head += 1;
    }
    // Up to a `--` (and no further), when it fits with the last word: the tail is then what
    // still fits after it.
    if let Some(dd) = words.iter().position(|w| *w == "--") {
        let upto: usize = words[..=dd].iter().map(|w| w.len() + 1).sum();
        let last = words.last().map_or(0, |w| w.len());
        if dd + 1 < words.len() && upto + 4 + last <= width {
            head = dd + 1;
            tail = 0;
            tail_len = 0;
            while head + tail < words.len()
                && upto + 4 + tail_len + words[words.len() - 1 - tail].len() <= width
            {
                tail_len += words[words.len() - 1 - tail].len() + 1;
                tail += 1;
            }
        }
    }
    format!(
        "{} ... {}",
        words[..head].join(" "),
        words[words.len() - tail..].join(" ")
    )
}

/// The mount form's full command (help, man page, completions).
pub(crate) fn mount_command() -> clap::Command {
    with_mount_options(Args::command().after_help(mount_after_help()))
}

/// The subcommands' full command, `mount` with its options.
pub(crate) fn cli_command() -> clap::Command {
    Cli::command()
        .mut_subcommand("mount", with_mount_options)
        .mut_subcommand("commit", |c| {
            c.mut_arg("source", |a| {
                a.value_name("MNT")
                    .index(1)
                    .help("The editable mount's mount point, or its edits directory (-o edit=DIR).")
            })
            .mut_arg("out", |a| a.index(2))
            .mut_arg("edits_dir", |a| a.hide(true))
        })
}

/// The mount form's [`Args`] of a tfmount command line `argv` (its first item the program's
/// name): `tfmount [OPTIONS] SOURCE MOUNTPOINT` or `tfmount mount ...`; `None` for anything else
/// (another subcommand, or a line that does not parse).
pub(crate) fn mount_line(argv: &[OsString]) -> Option<Args> {
    if is_subcommand(argv.get(1).map(|a| a.as_os_str())) {
        let m = cli_command().try_get_matches_from(argv).ok()?;
        match m.subcommand() {
            Some(("mount", sub)) => mount_args(sub).ok(),
            _ => None,
        }
    } else {
        let m = mount_command().try_get_matches_from(argv).ok()?;
        mount_args(&m).ok()
    }
}

/// The MOUNTPOINT of a `tfmount mount-helper` command line `argv`; `None` for anything else.
pub(crate) fn helper_line(argv: &[OsString]) -> Option<PathBuf> {
    if argv.get(1).map(|a| a.as_os_str()) != Some(OsStr::new("mount-helper")) {
        return None;
    }
    match Cli::try_parse_from(argv).ok()?.command {
        Command::MountHelper(h) => Some(h.mountpoint),
        _ => None,
    }
}

/// Parses the mount form `tfmount [OPTIONS] SOURCE MOUNTPOINT`; exits on `--help`, `--version`
/// and usage errors (status 2), as clap does.
pub(crate) fn parse_mount(argv: Vec<OsString>) -> Args {
    let m = mount_command().get_matches_from(argv);
    mount_args(&m).unwrap_or_else(|e| e.exit())
}

/// Parses `tfmount SUBCOMMAND ...`, as [`parse_mount`].
pub(crate) fn parse_cli(argv: Vec<OsString>) -> Command {
    let m = cli_command().get_matches_from(argv);
    let parsed = match m.subcommand() {
        Some(("mount", sub)) => mount_args(sub).map(Command::Mount),
        Some(("export" | "commit", sub)) => Cli::from_arg_matches(&m).map(|c| match c.command {
            Command::Export(mut a) => {
                a.edits = export_edits(sub);
                Command::Export(a)
            }
            Command::Commit(mut a) => {
                a.edits = export_edits(sub);
                Command::Commit(a)
            }
            other => other,
        }),
        _ => Cli::from_arg_matches(&m).map(|c| c.command),
    };
    parsed.unwrap_or_else(|e| e.exit())
}

/// A tolerance: a finite number, 0 or more.
fn non_negative(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{s:?} is not a number of 0 or more")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subcommand_selection() {
        assert!(is_subcommand(Some(OsStr::new("ls"))));
        assert!(is_subcommand(Some(OsStr::new("mount"))));
        assert!(!is_subcommand(Some(OsStr::new("./ls"))));
        assert!(!is_subcommand(Some(OsStr::new("-f"))));
        assert!(!is_subcommand(None));
        Cli::try_parse_from(["tfmount", "ls", "-lR", "src", "a/b"]).expect("ls parses");
        Cli::try_parse_from(["tfmount", "mount", "-f", "src", "mnt"]).expect("mount parses");
        assert!(Cli::try_parse_from(["tfmount", "cat", "src"]).is_err());
    }

    #[test]
    fn option_flags_become_options_after_dash_o() {
        let m = mount_command()
            .try_get_matches_from([
                "tfmount",
                "-o",
                "threads=4,nocrc",
                "--threads",
                "8",
                "--cache-size",
                "1GiB",
                "--no-crc",
                "s",
                "m",
            ])
            .expect("parses");
        let a = mount_args(&m).expect("args");
        assert_eq!(
            a.options,
            ["threads=4,nocrc", "nocrc", "cache_size=1GiB", "threads=8"]
        );
        let m = cli_command()
            .try_get_matches_from(["tfmount", "mount", "--no-crc", "s", "m"])
            .expect("mount parses");
        let Some(("mount", sub)) = m.subcommand() else {
            panic!("mount subcommand");
        };
        assert_eq!(mount_args(sub).expect("args").options, ["nocrc"]);
    }

    /// `tfmount --help`'s SUBCOMMANDS table has a row for every subcommand the command line
    /// defines (it left out `warm` and `cache`), each with an example of that subcommand, and
    /// no line wider than [`HELP_WIDTH`] (two rows wrapped mid-example).
    #[test]
    fn the_subcommands_table_is_every_subcommand_in_its_width() {
        let help = mount_command()
            .term_width(HELP_WIDTH)
            .render_long_help()
            .to_string();
        let start = help.find("SUBCOMMANDS (").expect("a SUBCOMMANDS table");
        let end = start + help[start..].find("\n\n").expect("its end");
        let table = &help[start..end];
        let names: Vec<&str> = SUBCOMMANDS
            .iter()
            .copied()
            .filter(|n| *n != "help")
            .collect();
        let defined: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .filter(|n| n != "help")
            .collect();
        assert_eq!(names, defined, "SUBCOMMANDS and the definitions");
        let rows: Vec<&str> = table
            .lines()
            .skip(1)
            .filter_map(|l| l.strip_prefix("  "))
            .filter(|l| !l.starts_with(' '))
            .map(|l| l.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(rows, names, "{table}");
        for n in &names {
            assert!(
                table.lines().any(|l| {
                    let l = l.trim_start();
                    l == format!("tfmount {n}") || l.starts_with(&format!("tfmount {n} "))
                }),
                "no example of {n}:\n{table}"
            );
        }
        for l in help.lines() {
            assert!(l.len() <= HELP_WIDTH, "{} columns: {l}", l.len());
        }
    }

    #[test]
    fn a_long_example_is_shortened_in_the_middle() {
        let long = "tfmount mount-helper --uid 1000 --gid 1000 /mnt/m -- setpriv --reuid 1000 \
--regid 1000 --clear-groups --inh-caps=-all --bounding-set=-all tfmount -f model/ /dev/fd/3";
        let s = shortened(long, 60);
        assert!(s.len() <= 60, "{s}");
        assert!(
            s.starts_with("tfmount mount-helper")
                && s.ends_with("/dev/fd/3")
                && s.contains(" ... "),
            "{s}"
        );
        // The `--` kept: `...` stands for the command's arguments.
        let s = shortened(long, 82);
        assert!(s.contains("/mnt/m -- ... ") && s.len() <= 82, "{s}");
        assert_eq!(shortened("tfmount list", 60), "tfmount list");
    }

    #[test]
    fn help_lists_every_mount_option() {
        let help = mount_command().render_long_help().to_string();
        for o in OPTIONS {
            assert!(help.contains(&crate::options::usage(o)), "{}", o.name);
        }
        assert!(help.contains("s3://"), "SOURCE help names URLs");
    }
}
