//! What a test needs from outside the crate (a Python with numpy, TensorFlow, a test server,
//! FUSE), found once per test process, and what happens when it is missing.
//!
//! - With `TFMOUNT_REQUIRE_ALL` set (`scripts/test.sh` and CI set it), a missing component fails
//!   the test with one line naming it: nothing is skipped where everything should be installed.
//! - Otherwise the test returns early and the skip is recorded under the build directory
//!   (`target/<profile>/tfmount-skips/`); the last test target, `tests/skipped.rs`, prints one
//!   line naming what was left out and the command that adds it, then forgets the records.
//!
//! The Python used is the first of `$TFMOUNT_PYTHON`, the test virtualenv that
//! `scripts/test.sh` makes (`$TFMOUNT_TEST_VENV`, default `~/.cache/tfmount-test-venv`), and
//! `python3`, that imports the modules a test asks for.
//!
//! Used by the library's unit tests (`crate::testkit::requires`) and by `tests/` (through the
//! `testkit` feature); it uses nothing but std.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

/// The command that installs everything the tests use and runs them all.
pub const SETUP: &str = "scripts/test.sh";

/// The directory skip records go to: beside the test executables' `deps/` directory.
pub fn skip_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let deps = exe.parent()?;
    Some(deps.parent()?.join("tfmount-skips"))
}

/// Whether missing components fail tests instead of skipping them.
pub fn require_all() -> bool {
    std::env::var_os("TFMOUNT_REQUIRE_ALL").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Called when `what` is missing for `test`: panics under `TFMOUNT_REQUIRE_ALL`, else records
/// the skip and prints a note (shown with `--nocapture`). Returns `false` for `if !...` chains.
pub fn missing(what: &str, test: &str) -> bool {
    let test = label(test);
    if require_all() {
        panic!("{test} needs {what}, which is missing ({SETUP} installs it)");
    }
    eprintln!("{test}: skipped, needs {what} ({SETUP} installs it)");
    if let Some(dir) = skip_dir() {
        let _ = std::fs::create_dir_all(&dir);
        let file = dir.join(format!("{}.txt", std::process::id()));
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(file)
        {
            let _ = writeln!(f, "{what}\t{test}");
        }
    }
    false
}

/// `test`, or the name of the running test (the test harness names each test's thread).
fn label(test: &str) -> String {
    if !test.is_empty() {
        return test.to_string();
    }
    let t = std::thread::current();
    t.name().unwrap_or("a test").to_string()
}

fn venv_python() -> Option<PathBuf> {
    let venv = match std::env::var_os("TFMOUNT_TEST_VENV") {
        Some(v) => PathBuf::from(v),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/tfmount-test-venv"),
    };
    let py = venv.join("bin/python");
    py.is_file().then_some(py)
}

/// The Python candidates, in order of preference.
fn candidates() -> Vec<PathBuf> {
    let mut c = Vec::new();
    if let Some(p) = std::env::var_os("TFMOUNT_PYTHON").filter(|p| !p.is_empty()) {
        c.push(PathBuf::from(p));
    }
    c.extend(venv_python());
    c.push(PathBuf::from("python3"));
    c
}

fn imports(py: &Path, modules: &str) -> bool {
    Command::new(py)
        .args(["-c", &format!("import {modules}")])
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A Python that imports every module of `modules` (comma-separated, as in an `import`
/// statement), found once per process and list of modules.
pub fn find_python(modules: &str) -> Option<PathBuf> {
    static FOUND: OnceLock<Mutex<HashMap<String, Option<PathBuf>>>> = OnceLock::new();
    let map = FOUND.get_or_init(Default::default);
    if let Some(hit) = map.lock().ok()?.get(modules) {
        return hit.clone();
    }
    let found = candidates().into_iter().find(|py| imports(py, modules));
    if let Ok(mut m) = map.lock() {
        m.insert(modules.to_string(), found.clone());
    }
    found
}

/// [`find_python`], recording a skip for `test` when there is none.
pub fn python(modules: &str, test: &str) -> Option<PathBuf> {
    let py = find_python(modules);
    if py.is_none() {
        missing(&format!("a Python with {modules}"), test);
    }
    py
}

/// An executable in the test virtualenv's `bin/`, on `PATH`, or at one of `fallbacks`.
pub(crate) fn find_program(program: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    let in_venv = venv_python()
        .and_then(|py| Some(py.parent()?.join(program)))
        .filter(|p| p.is_file());
    let on_path = || {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
    };
    in_venv
        .or_else(on_path)
        .or_else(|| fallbacks.iter().map(PathBuf::from).find(|p| p.is_file()))
}

/// [`find_program`], recording a skip for `test` when it is missing.
pub fn program(program: &str, fallbacks: &[&str], test: &str) -> Option<PathBuf> {
    let p = find_program(program, fallbacks);
    if p.is_none() {
        missing(program, test);
    }
    p
}

/// Whether this process can mount FUSE file systems (root and `/dev/fuse`); records a skip
/// for `test` when it cannot.
pub fn fuse(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc_geteuid() } == 0;
    if root && Path::new("/dev/fuse").exists() {
        return true;
    }
    missing("FUSE (root and /dev/fuse)", test)
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
