//! The last test target (named `zz_skipped` in Cargo.toml so that cargo runs it after the
//! others): prints one line naming the components that tests skipped for lack of, with the
//! command that installs them (see `src/testkit/requires.rs`), then forgets the records.
//! Prints nothing when nothing was skipped.

use std::collections::{BTreeMap, BTreeSet};

use tfmount::testkit::requires;

fn main() {
    let Some(dir) = requires::skip_dir() else {
        return;
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    // Each record is "WHAT<TAB>TEST"; a test that checked twice counts once.
    let mut records = BTreeSet::new();
    for e in entries.flatten() {
        if let Ok(text) = std::fs::read_to_string(e.path()) {
            records.extend(text.lines().map(str::to_string));
        }
        let _ = std::fs::remove_file(e.path());
    }
    let mut by_what: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in &records {
        let (what, test) = r.split_once('\t').unwrap_or((r, ""));
        by_what.entry(what).or_default().insert(test);
    }
    if by_what.is_empty() {
        return;
    }
    let tests: BTreeSet<&str> = by_what.values().flatten().copied().collect();
    let list: Vec<String> = by_what
        .iter()
        .map(|(w, t)| match t.len() {
            1 => format!("{w} (1 test)"),
            n => format!("{w} ({n} tests)"),
        })
        .collect();
    println!(
        "tfmount: {} tests skipped, missing: {}. Run {} to install them and run every test.",
        tests.len(),
        list.join(", "),
        requires::SETUP
    );
}
