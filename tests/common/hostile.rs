//! The hostile-input harness the sweeps configure (`tests/formats/*_hostile.rs`, the
//! conformance suite's damage): damage to a file ([`Damage`], [`damages`]), a damaged source
//! opened as a mount would ([`open`]) and its files visited ([`each_file`]) and read whole
//! ([`read_to_size`]), and a [`Sweep`] that serves thousands of inputs, each with its panic caught
//! and reported quietly and its largest allocation measured (the `formats` suite installs the
//! tracking allocator, `tests/formats/main.rs`), counting what each format's oracle found; and a
//! scratch directory in tmpfs.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use super::tracking_alloc::largest_allocation;
use tfmount::fs::{DirEntry, Fs, Kind, Options, ROOT};
use tfmount::testkit::rng::Rng;

/// One damage of one file.
#[derive(Debug, Clone, Copy)]
pub enum Damage {
    /// The first `n` bytes.
    Cut(usize),
    /// Byte `at` xor `mask`.
    Flip(usize, u8),
}

impl Damage {
    /// The damaged copy of `orig`.
    pub fn apply(self, orig: &[u8]) -> Vec<u8> {
        match self {
            Damage::Cut(n) => orig[..n.min(orig.len())].to_vec(),
            Damage::Flip(at, mask) => {
                let mut b = orig.to_vec();
                b[at] ^= mask;
                b
            }
        }
    }

    /// The damage as a reference process is told it (`cut=N`, `flip=AT:MASK`).
    pub fn spec(self) -> String {
        match self {
            Damage::Cut(n) => format!("cut={n}"),
            Damage::Flip(at, mask) => format!("flip={at}:{mask}"),
        }
    }
}

/// The damages a sweep gives a file of `len` bytes: every truncation up to `cut_all` bytes, then
/// one every `cut_stride` bytes; then `flips` single-bit flips at places drawn from `rng` (the
/// place, then the bit).
pub fn damages(
    len: usize,
    cut_all: usize,
    cut_stride: usize,
    flips: usize,
    rng: &mut Rng,
) -> Vec<Damage> {
    let mut out: Vec<Damage> = (0..len.min(cut_all)).map(Damage::Cut).collect();
    out.extend((cut_all..len).step_by(cut_stride).map(Damage::Cut));
    for _ in 0..flips {
        let at = rng.index(len);
        out.push(Damage::Flip(at, 1 << rng.index(8)));
    }
    out
}

/// A (damaged) source opened as a mount of it would be, for a sweep: probed, its derived views
/// listed (so that they are walked and read too), nothing followed live.
pub fn open(path: &Path) -> Result<Fs, String> {
    let probed = tfmount::probe::probe(path).map_err(|e| e.to_string())?;
    let opts = Options {
        live: false,
        ..crate::common::views_listed()
    };
    Fs::new(&probed, &opts).map_err(|e| e.to_string())
}

/// Visits every entry but directories below directory `from` of `fs` (depth first, in listing
/// order), with the directory it is in and its path from `from` (`/`-separated, from `at`); a
/// directory that does not list is passed over.
pub fn each_file(fs: &Fs, from: u64, at: &str, mut visit: impl FnMut(u64, &DirEntry, &str)) {
    let mut todo = vec![(from, at.to_string())];
    while let Some((d, at)) = todo.pop() {
        let mut entries = Vec::new();
        let listed = fs.readdir(d, 0, |e| {
            entries.push(e);
            false
        });
        if listed.is_err() {
            continue;
        }
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = format!("{at}/{}", String::from_utf8_lossy(&e.name));
            if e.kind == Kind::Dir {
                todo.push((e.ino, p));
                continue;
            }
            visit(d, &e, &p);
        }
    }
}

/// The key a served file names (its `user.tfmount.key`), or `fallback`.
pub fn key_of(fs: &Fs, ino: u64, fallback: impl FnOnce() -> String) -> String {
    fs.getxattr(ino, tfmount::fs::KEY_XATTR.as_bytes())
        .map(|k| String::from_utf8_lossy(&k).into_owned())
        .unwrap_or_else(|_| fallback())
}

/// One sweep of damaged inputs: each served under [`in_input`] with its largest allocation
/// measured, the panics and the allocations over `max_allocation` recorded against the input,
/// and what the format's oracle found wrong; the counts a sweep reports.
#[derive(Debug, Default)]
pub struct Sweep {
    pub max_allocation: usize,
    pub inputs: usize,
    pub opened: usize,
    pub panics: Vec<String>,
    pub big: Vec<String>,
    pub wrong: Vec<String>,
}

impl Sweep {
    /// A sweep allowing no single allocation over `max_allocation` bytes per input (and the
    /// panic hook that keeps the inputs' panics quiet installed).
    pub fn new(max_allocation: usize) -> Sweep {
        quiet_panics_in_inputs();
        Sweep {
            max_allocation,
            ..Sweep::default()
        }
    }

    /// Serves input `what` with `serve`: counted; its allocation over the maximum and its panic
    /// recorded; what it served, unless it panicked.
    pub fn input<S>(&mut self, what: &str, serve: impl FnOnce() -> S) -> Option<S> {
        let mut served = None;
        let largest = largest_allocation(|| served = Some(in_input(serve)));
        self.inputs += 1;
        if largest > self.max_allocation {
            self.big
                .push(format!("{what}: one allocation of {largest} bytes"));
        }
        match served.expect("ran") {
            Ok(s) => Some(s),
            Err(p) => {
                self.panics.push(format!("{what}: panic: {p}"));
                None
            }
        }
    }

    /// Adds the counts and findings of `other`.
    pub fn merge(&mut self, other: Sweep) {
        self.inputs += other.inputs;
        self.opened += other.opened;
        self.panics.extend(other.panics);
        self.big.extend(other.big);
        self.wrong.extend(other.wrong);
    }

    /// The panics, oversized allocations and wrong bytes found, at most `each` of each kind.
    pub fn failures(&self, each: usize) -> Vec<String> {
        [&self.panics, &self.wrong, &self.big]
            .into_iter()
            .flat_map(|l| l.iter().take(each).cloned())
            .collect()
    }

    /// One line: the inputs, and the panics, wrong bytes and oversized allocations found.
    pub fn summary(&self) -> String {
        format!(
            "{} inputs, {} opened; {} panics, {} wrong, {} oversized allocations",
            self.inputs,
            self.opened,
            self.panics.len(),
            self.wrong.len(),
            self.big.len()
        )
    }
}

/// The whole file `ino` of `fs`, read in pieces of `piece` bytes; nothing may be read past
/// the size it was opened with.
pub fn read_to_size_in(fs: &Fs, ino: u64, piece: usize) -> Result<Vec<u8>, String> {
    let size = fs.open(ino).map_err(|e| e.to_string())?.size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let b = fs
            .read(ino, out.len() as u64, piece)
            .map_err(|e| e.to_string())?;
        if b.is_empty() {
            return Err(format!("short read at {} of {size}", out.len()));
        }
        out.extend_from_slice(&b);
    }
    let past = fs.read(ino, size, 4096).map_err(|e| e.to_string())?;
    assert!(past.is_empty(), "{} bytes read past the size", past.len());
    Ok(out)
}

/// [`read_to_size_in`] pieces of 1 MiB.
pub fn read_to_size(fs: &Fs, ino: u64) -> Result<Vec<u8>, String> {
    read_to_size_in(fs, ino, 1 << 20)
}

/// A scratch directory in tmpfs where there is one.
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("tempdir")
}

thread_local! {
    /// Set while an input runs: its panic is caught and reported with the input, not printed.
    static IN_INPUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Where the last caught panic happened.
    static WHERE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Installs (once) a panic hook that keeps quiet about panics inside [`in_input`] (thousands of
/// hostile inputs) and records where they happened; every other panic is printed as usual.
pub fn quiet_panics_in_inputs() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_INPUT.with(|q| q.get()) {
                let at = info
                    .location()
                    .map_or(String::new(), |l| format!(" at {}:{}", l.file(), l.line()));
                WHERE.with(|w| *w.borrow_mut() = at);
            } else {
                prev(info);
            }
        }));
    });
}

/// Runs `f` for one input; a panic comes back as its message and place.
pub fn in_input<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    IN_INPUT.with(|q| q.set(true));
    let r = catch_unwind(AssertUnwindSafe(f));
    IN_INPUT.with(|q| q.set(false));
    r.map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        format!("{msg}{}", WHERE.with(|w| w.borrow().clone()))
    })
}
