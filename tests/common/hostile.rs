//! What the hostile-input sweeps share (`tests/*_hostile.rs`): damage to a file, reading a
//! served file whole through `Fs`, running thousands of inputs with their panics caught and
//! reported quietly, and a scratch directory in tmpfs.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use tfmount::fs::Fs;

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

/// The whole file `ino` of `fs`, read in pieces of `piece` bytes; nothing may be read past
/// the size it was opened with.
pub fn read_all_in(fs: &Fs, ino: u64, piece: usize) -> Result<Vec<u8>, String> {
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

/// [`read_all_in`] pieces of 1 MiB.
pub fn read_all(fs: &Fs, ino: u64) -> Result<Vec<u8>, String> {
    read_all_in(fs, ino, 1 << 20)
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
