//! Fuzz body for an Orbax item's `_METADATA` (`tfmount::formats::orbax::tree`): one input is the
//! JSON; parsed, every leaf must be a usable path (components that are file names), the leaves
//! sorted by the path tfmount shows and each path once.

use std::path::Path;

use crate::formats::orbax::tree;

pub(crate) fn orbax_meta(data: &[u8]) {
    let _ = tree::looks_like(data);
    let Ok(m) = tree::parse(data) else {
        return;
    };
    let shown: Vec<String> = m.leaves.iter().map(|l| l.shown()).collect();
    for (l, s) in m.leaves.iter().zip(&shown) {
        assert!(!l.path.is_empty(), "a leaf with no path");
        for c in &l.path {
            assert!(
                !c.is_empty() && c != "." && c != ".." && !c.contains(['/', '\0']),
                "a key that is not a file name: {c:?}"
            );
        }
        assert!(!s.is_empty());
    }
    assert!(
        shown.windows(2).all(|w| w[0] < w[1]),
        "leaves sorted, each path once"
    );
}

/// Seeds: every `_METADATA` of `tests/fixtures/orbax/`.
pub(crate) fn seeds(fixtures: &Path) -> std::io::Result<Vec<(&'static str, String, Vec<u8>)>> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.file_name().is_some_and(|n| n == "_METADATA") {
                out.push(p);
            }
        }
        Ok(())
    }
    let root = fixtures.join("orbax");
    let mut files = Vec::new();
    walk(&root, &mut files)?;
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p
                .strip_prefix(&root)
                .unwrap_or(&p)
                .to_string_lossy()
                .replace('/', "_");
            Ok(("orbax_meta", name, std::fs::read(&p)?))
        })
        .collect()
}
