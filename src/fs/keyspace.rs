//! The key-prefix directory engine: a sorted list of names (checkpoint keys, graph node names)
//! shown as a directory tree, `/` separating components. A directory is named by its depth and
//! the position of the first shown name under it; listing seeks past whole subdirectories, so a
//! directory costs its own entries, not the names below it (and the hidden names it walks past:
//! a directory whose names are all hidden is not shown). Used by every subtree whose
//! directories come from names: checkpoint variables (and the views mirroring them) and meta
//! graph name spaces.

use std::path::Path;

use crate::error::{FsError, FsResult};
use crate::fs::subtree::Entry;
use crate::fs::Kind;
use crate::namespace::ino::{cookie, Ino};
use crate::namespace::{self, Unescaped};

/// Separates the components of a name.
pub(crate) const SEP: u8 = b'/';
/// The cookie sub-entry number of a directory item (leaf files use 0..SUB_DIR).
pub(crate) const SUB_DIR: u64 = 7;

/// A sorted sequence of names, addressed by position.
pub(crate) trait Names {
    /// The first position whose name is `>= key`.
    fn seek(&self, key: &[u8]) -> FsResult<Option<u64>>;
    /// The position after `pos`.
    fn next(&self, pos: u64) -> FsResult<Option<u64>>;
    /// The name at `pos`.
    fn name(&self, pos: u64) -> FsResult<Vec<u8>>;
    /// Names that are not shown (checkpoint headers, slice entries).
    fn hidden(&self, _name: &[u8]) -> bool {
        false
    }
    /// Whether the name `name` at `pos` is not shown: [`Names::hidden`], or what else the
    /// position says (a view leaving out tensors it has no file for). A directory is shown when
    /// a name under it is, and is numbered by the first such name.
    fn hidden_at(&self, _pos: u64, name: &[u8]) -> bool {
        self.hidden(name)
    }
    /// Whether `/` in names makes directories (else each name is one component).
    fn split(&self) -> bool {
        true
    }
}

/// The raw prefix (with its trailing `/`) of the directory made of the first `depth`
/// components of `name`; empty for depth 0.
pub(crate) fn prefix_of(name: &[u8], depth: u16) -> Option<Vec<u8>> {
    if depth == 0 {
        return Some(Vec::new());
    }
    let mut seen = 0u16;
    for (i, &b) in name.iter().enumerate() {
        if b == SEP {
            seen += 1;
            if seen == depth {
                return Some(name[..=i].to_vec());
            }
        }
    }
    None
}

/// The first shown name at or after `pos` that starts with `prefix` (`None`: no shown name
/// under it). Walks past hidden names one by one.
fn first_shown<N: Names + ?Sized>(
    names: &N,
    prefix: &[u8],
    mut pos: Option<u64>,
) -> FsResult<Option<u64>> {
    while let Some(p) = pos {
        let n = names.name(p)?;
        if !n.starts_with(prefix) {
            return Ok(None);
        }
        if !names.hidden_at(p, &n) {
            return Ok(Some(p));
        }
        pos = names.next(p)?;
    }
    Ok(None)
}

/// The prefix of the directory `(depth, pos)`.
pub(crate) fn dir_prefix<N: Names + ?Sized>(names: &N, depth: u16, pos: u64) -> FsResult<Vec<u8>> {
    if depth == 0 {
        return Ok(Vec::new());
    }
    prefix_of(&names.name(pos)?, depth).ok_or(FsError::NotFound)
}

/// The directory above `(depth, pos)`: `None` for the root (depth 0).
pub(crate) fn parent<N: Names + ?Sized>(
    names: &N,
    depth: u16,
    pos: u64,
) -> FsResult<Option<(u16, u64)>> {
    match depth {
        0 => Ok(None),
        1 => Ok(Some((0, 0))),
        _ => {
            let up = prefix_of(&names.name(pos)?, depth - 1).ok_or(FsError::NotFound)?;
            let p = first_shown(names, &up, names.seek(&up)?)?.ok_or(FsError::NotFound)?;
            Ok(Some((depth - 1, p)))
        }
    }
}

/// The component of `name` right after `prefix`, and whether more components follow.
pub(crate) fn next_component<'k>(name: &'k [u8], prefix: &[u8], split: bool) -> (&'k [u8], bool) {
    let rest = &name[prefix.len()..];
    match rest.iter().position(|&b| b == SEP) {
        Some(i) if split => (&rest[..i], true),
        _ => (rest, false),
    }
}

/// A key just past every name under `prefix ‖ comp /` (they all sort below `prefix ‖ comp 0`,
/// since `0` follows `/`).
fn skip_target(prefix: &[u8], comp: &[u8]) -> Vec<u8> {
    let mut t = prefix.to_vec();
    t.extend_from_slice(comp);
    t.push(SEP + 1);
    t
}

/// Finds the item a path component names in the directory whose names start with `prefix`:
/// for a file, the name `prefix ‖ component`; for a directory, the first name under
/// `prefix ‖ component /`. Only the canonical spelling of a component resolves.
pub(crate) fn resolve<N: Names + ?Sized>(
    names: &N,
    prefix: &[u8],
    escaped: &[u8],
    is_dir: bool,
) -> FsResult<Option<u64>> {
    let split = names.split();
    let nested = is_dir && split;
    let fits = |rest: &[u8]| {
        if nested {
            rest.first() == Some(&SEP)
        } else {
            rest.is_empty()
        }
    };
    match namespace::unescape(escaped, is_dir).ok_or(FsError::NotFound)? {
        Unescaped::Exact(comp) => {
            if split && comp.contains(&SEP) {
                return Ok(None);
            }
            let mut target = prefix.to_vec();
            target.extend_from_slice(&comp);
            let end = target.len();
            if nested {
                // A directory: its first shown name.
                target.push(SEP);
                return first_shown(names, &target, names.seek(&target)?);
            }
            let Some(p) = names.seek(&target)? else {
                return Ok(None);
            };
            let n = names.name(p)?;
            let hit = n.starts_with(&target) && fits(&n[end..]) && !names.hidden_at(p, &n);
            Ok(hit.then_some(p))
        }
        Unescaped::Hashed {
            prefix: start,
            hash,
        } => {
            let mut target = prefix.to_vec();
            target.extend_from_slice(&start);
            let mut pos = names.seek(&target)?;
            while let Some(p) = pos {
                let n = names.name(p)?;
                if !n.starts_with(&target) {
                    break;
                }
                let (comp, _) = next_component(&n, prefix, split);
                if fits(&n[prefix.len() + comp.len()..])
                    && !names.hidden_at(p, &n)
                    && namespace::fnv1a64(comp) == hash
                    && namespace::escape(comp, is_dir) == escaped
                {
                    return Ok(Some(p));
                }
                pos = names.next(p)?;
            }
            Ok(None)
        }
    }
}

/// One item of a directory listing.
pub(crate) enum Item<'a> {
    /// A subdirectory: its first name is at `pos`; `comp` is its raw component.
    Dir { pos: u64, comp: &'a [u8] },
    /// A name ending here: emit its entries from sub-entry `first_sub` on.
    Leaf {
        pos: u64,
        comp: &'a [u8],
        first_sub: u64,
    },
}

/// Lists the directory whose names start with `prefix`, continuing after `cookie` (below
/// [`cookie::BASE`]: from the start). `visit` returns true when the reply is full. Cookies of
/// entries are `cookie::of(pos, sub)`: `SUB_DIR` for a directory, the leaf's own sub-entry
/// numbers for its files.
pub(crate) fn list<N: Names + ?Sized>(
    names: &N,
    prefix: &[u8],
    cookie: u64,
    mut visit: impl FnMut(Item<'_>) -> FsResult<bool>,
) -> FsResult<()> {
    let split = names.split();
    let (mut pos, mut first_sub) = if cookie < cookie::BASE {
        (names.seek(prefix)?, 0)
    } else {
        let (p, sub) = cookie::split(cookie);
        if sub == SUB_DIR && split {
            let n = names.name(p)?;
            if !n.starts_with(prefix) {
                return Ok(());
            }
            let (comp, _) = next_component(&n, prefix, split);
            (names.seek(&skip_target(prefix, comp))?, 0)
        } else {
            (Some(p), sub + 1)
        }
    };
    while let Some(p) = pos {
        let n = names.name(p)?;
        if !n.starts_with(prefix) {
            break;
        }
        if names.hidden_at(p, &n) {
            pos = names.next(p)?;
            first_sub = 0;
            continue;
        }
        let (comp, is_dir) = next_component(&n, prefix, split);
        if is_dir {
            if visit(Item::Dir { pos: p, comp })? {
                return Ok(());
            }
            pos = names.seek(&skip_target(prefix, comp))?;
        } else {
            if visit(Item::Leaf {
                pos: p,
                comp,
                first_sub,
            })? {
                return Ok(());
            }
            pos = names.next(p)?;
        }
        first_sub = 0;
    }
    Ok(())
}

/// Adds a subdirectory item as an entry. One that cannot be numbered (`ino` is `None`: nested
/// too deep, or past what the inode layout addresses) is logged, naming `source`, and left
/// out. True when the reply is full.
pub(crate) fn add_dir(
    source: &Path,
    pos: u64,
    comp: &[u8],
    ino: Option<Ino>,
    add: &mut dyn FnMut(Entry<'_>) -> bool,
) -> bool {
    let (Some(ino), Some(c)) = (ino, cookie::of(pos, SUB_DIR)) else {
        log::warn!(
            "{}: a name is nested too deep or there are too many to show: {}",
            source.display(),
            String::from_utf8_lossy(comp)
        );
        return false;
    };
    let name = namespace::escape(comp, true);
    add(Entry {
        ino,
        name: &name,
        kind: Kind::Dir,
        cookie: c,
    })
}

/// Adds a leaf's files, `escape(comp) ‖ suffix` each with its inode, from sub-entry `first_sub`
/// on. True when the reply is full.
pub(crate) fn add_files<'s>(
    pos: u64,
    comp: &[u8],
    first_sub: u64,
    files: impl IntoIterator<Item = (&'s [u8], FsResult<Ino>)>,
    add: &mut dyn FnMut(Entry<'_>) -> bool,
) -> FsResult<bool> {
    let stem = namespace::escape(comp, false);
    for (sub, (suffix, ino)) in files.into_iter().enumerate().skip(first_sub as usize) {
        let mut name = stem.clone();
        name.extend_from_slice(suffix);
        let c = cookie::of(pos, sub as u64).ok_or(FsError::NotFound)?;
        if add(Entry {
            ino: ino?,
            name: &name,
            kind: Kind::File,
            cookie: c,
        }) {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sorted vector of names.
    struct Sorted(Vec<&'static [u8]>);

    impl Names for Sorted {
        fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
            let i = self.0.partition_point(|n| *n < key);
            Ok((i < self.0.len()).then_some(i as u64))
        }
        fn next(&self, pos: u64) -> FsResult<Option<u64>> {
            Ok((pos as usize + 1 < self.0.len()).then_some(pos + 1))
        }
        fn name(&self, pos: u64) -> FsResult<Vec<u8>> {
            self.0
                .get(pos as usize)
                .map(|n| n.to_vec())
                .ok_or(FsError::NotFound)
        }
        fn hidden(&self, name: &[u8]) -> bool {
            name.first() == Some(&0)
        }
    }

    fn listing(n: &Sorted, prefix: &[u8], chunk: usize) -> Vec<String> {
        listing_of(n, prefix, chunk)
    }

    fn listing_of<N: Names>(n: &N, prefix: &[u8], chunk: usize) -> Vec<String> {
        let mut out = Vec::new();
        let mut cookie = 0;
        loop {
            let mut got = 0;
            list(n, prefix, cookie, |it| {
                let (s, c) = match it {
                    Item::Dir { pos, comp } => (
                        format!("{}/", String::from_utf8_lossy(comp)),
                        cookie::of(pos, SUB_DIR).unwrap(),
                    ),
                    // One entry per leaf: resuming after it (first_sub 1) emits nothing.
                    Item::Leaf { first_sub: 1.., .. } => return Ok(false),
                    Item::Leaf { pos, comp, .. } => (
                        String::from_utf8_lossy(comp).into_owned(),
                        cookie::of(pos, 0).unwrap(),
                    ),
                };
                out.push(s);
                cookie = c;
                got += 1;
                Ok(got == chunk)
            })
            .unwrap();
            if got < chunk {
                return out;
            }
        }
    }

    /// Names hidden by position (as `stats/` hides string tensors): a directory holding only
    /// such names is not shown, and a directory is numbered by its first shown name everywhere.
    struct ByPos(Sorted);

    impl Names for ByPos {
        fn seek(&self, key: &[u8]) -> FsResult<Option<u64>> {
            self.0.seek(key)
        }
        fn next(&self, pos: u64) -> FsResult<Option<u64>> {
            self.0.next(pos)
        }
        fn name(&self, pos: u64) -> FsResult<Vec<u8>> {
            self.0.name(pos)
        }
        fn hidden_at(&self, pos: u64, name: &[u8]) -> bool {
            self.0.hidden(name) || self.0 .0[pos as usize].ends_with(b"str")
        }
    }

    #[test]
    fn names_hidden_by_position_hide_their_directories() {
        let n = ByPos(Sorted(vec![
            b"a/str",
            b"a/x",
            b"b/c/str",
            b"b/d/str",
            b"b/e",
            b"b/f/str",
            b"b/f/y",
            b"only/deeper/str",
            b"only/str",
            b"z",
        ]));
        for chunk in 1..4 {
            assert_eq!(listing_of(&n, b"", chunk), ["a/", "b/", "z"]);
            assert_eq!(listing_of(&n, b"b/", chunk), ["e", "f/"]);
        }
        assert_eq!(resolve(&n, b"b/", b"f", true).unwrap(), Some(6));
        assert_eq!(resolve(&n, b"", b"a", true).unwrap(), Some(1));
        assert_eq!(resolve(&n, b"", b"b", true).unwrap(), Some(4));
        assert_eq!(resolve(&n, b"", b"only", true).unwrap(), None);
        assert_eq!(resolve(&n, b"b/", b"c", true).unwrap(), None);
        assert_eq!(resolve(&n, b"a/", b"str", false).unwrap(), None);
        assert_eq!(resolve(&n, b"a/", b"x", false).unwrap(), Some(1));
        assert_eq!(parent(&n, 2, 6).unwrap(), Some((1, 4)));
    }

    #[test]
    fn lists_each_entry_once_in_any_chunking() {
        let n = Sorted(vec![
            b"\0hidden",
            b"a",
            b"a/b",
            b"a/c/d",
            b"a/c/e",
            b"ab",
            b"b/x",
            b"c",
        ]);
        for chunk in 1..5 {
            assert_eq!(listing(&n, b"", chunk), ["a", "a/", "ab", "b/", "c"]);
            assert_eq!(listing(&n, b"a/", chunk), ["b", "c/"]);
        }
        assert_eq!(resolve(&n, b"", b"a", true).unwrap(), Some(2));
        assert_eq!(resolve(&n, b"", b"a", false).unwrap(), Some(1));
        assert_eq!(resolve(&n, b"a/", b"c", true).unwrap(), Some(3));
        assert_eq!(resolve(&n, b"a/", b"c", false).unwrap(), None);
        assert!(resolve(&n, b"", b"%61", false).is_err()); // not the canonical spelling
        assert_eq!(parent(&n, 2, 3).unwrap(), Some((1, 2)));
        assert_eq!(dir_prefix(&n, 2, 3).unwrap(), b"a/c/");
    }
}
