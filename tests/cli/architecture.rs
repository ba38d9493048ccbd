//! Executes the room map of `docs/architecture.md`: reads the crate's module tree and every path
//! its code names (`use` trees, `crate::`/`super::`/`self::` paths, a module's own children),
//! and fails on
//!
//! - a room (top-level module) the map does not list, or a listed room that does not exist;
//! - an import that goes up: a room may name only rooms of a lower layer (the map's `layer`
//!   column); rooms of the same layer do not name each other;
//! - a format folder (`src/formats/<name>/`) naming another format's folder: formats share only
//!   the files beside them in `src/formats/`;
//! - any cycle between modules (a module using its ancestors' items, as `super::X` does, is not
//!   an edge: a parent's items are its children's context; every other use is).
//!
//! Plain text, no parser crate: comments and string literals are blanked, then the tokens are
//! scanned for paths. The checker's own tests below feed it small trees with an upward import,
//! a cycle and a format naming another, and see each refused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path (`["fs", "build"]`; the crate root is `[]`).
type Module = Vec<String>;

/// The rooms of the map: name → layer (`None`: test code, which any room's tests may use and
/// which may use any room).
type Rooms = BTreeMap<String, Option<u32>>;

/// One source file: its module path and its text.
struct File {
    module: Module,
    text: String,
}

/// A use of module `to` by module `from`, and the path as written (for the message).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    from: Module,
    to: Module,
    written: String,
}

fn show(m: &[String]) -> String {
    if m.is_empty() {
        "crate".into()
    } else {
        m.join("::")
    }
}

/// Blanks comments, string and char literals (keeping line breaks, so nothing else moves).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, c: u8| out.push(if c == b'\n' { b'\n' } else { b' ' });
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    out.extend_from_slice(b"  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"'
                    && b[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|&&h| h == b'#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &x in &b[i..j.min(b.len())] {
                blank(&mut out, x);
            }
            i = j;
        } else if c == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            out.push(b' ');
            i += 1;
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}'); a lifetime ('a) is left alone.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..]
                    .iter()
                    .position(|&x| x == b'\'')
                    .map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    out.resize(out.len() + e + 1 - i, b' ');
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(&'static str),
}

fn tokens(code: &str) -> Vec<Tok> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let s = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            // r#ident
            out.push(Tok::Ident(code[s..i].to_string()));
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Tok::Punct("::"));
            i += 2;
        } else {
            let p = match c {
                b'{' => "{",
                b'}' => "}",
                b',' => ",",
                b';' => ";",
                b'*' => "*",
                b'#' => "#",
                b'[' => "[",
                c if c.is_ascii_whitespace() => " ",
                _ => "other",
            };
            if p != " " {
                out.push(Tok::Punct(p));
            }
            i += 1;
        }
    }
    out
}

/// The paths of a `use` tree starting at `toks[i]` (after `use`), each as its segments; returns
/// the index after the tree.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) if s == "as" => {
                i += 2; // the alias
                out.push(path.clone());
                return i;
            }
            Some(Tok::Ident(s)) => {
                if s != "self" || path.is_empty() {
                    path.push(s.clone());
                }
                i += 1;
            }
            Some(Tok::Punct("::")) => i += 1,
            Some(Tok::Punct("*")) => {
                out.push(path.clone());
                return i + 1;
            }
            Some(Tok::Punct("{")) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Punct("}")) => return i + 1,
                        Some(Tok::Punct(",")) => i += 1,
                        None => return i,
                        _ => i = use_tree(toks, i, &path, out),
                    }
                }
            }
            _ => {
                out.push(path.clone());
                return i;
            }
        }
    }
}

/// Every path file `f` names, with the number of inline modules (`mod tests { .. }`) it is
/// written in (for `super::`), and its declared child modules.
fn paths_of(f: &File) -> (Vec<(Vec<String>, usize)>, BTreeSet<String>) {
    let toks = tokens(&code_only(&f.text));
    let mut children = BTreeSet::new();
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut inline: Vec<usize> = Vec::new(); // brace depths where inline modules opened
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct("{") => depth += 1,
            Tok::Punct("}") => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
            }
            Tok::Ident(k) if k == "mod" => {
                if let Some(Tok::Ident(name)) = toks.get(i + 1) {
                    match toks.get(i + 2) {
                        Some(Tok::Punct(";")) if inline.is_empty() => {
                            children.insert(name.clone());
                        }
                        Some(Tok::Punct("{")) => {
                            inline.push(depth);
                            depth += 1;
                            i += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
            }
            Tok::Ident(k) if k == "use" => {
                let mut paths = Vec::new();
                i = use_tree(&toks, i + 1, &[], &mut paths);
                out.extend(paths.into_iter().map(|p| (p, inline.len())));
                continue;
            }
            Tok::Ident(first) if toks.get(i + 1) == Some(&Tok::Punct("::")) => {
                let preceded = i > 0 && toks[i - 1] == Tok::Punct("::");
                let mut p = vec![first.clone()];
                let mut j = i + 1;
                while toks.get(j) == Some(&Tok::Punct("::")) {
                    match toks.get(j + 1) {
                        Some(Tok::Ident(s)) => p.push(s.clone()),
                        _ => break,
                    }
                    j += 2;
                }
                if !preceded {
                    out.push((p, inline.len()));
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    (out, children)
}

/// The modules each module uses (edges to its own ancestors left out).
fn edges(files: &[File]) -> Vec<Edge> {
    let modules: BTreeSet<Module> = files.iter().map(|f| f.module.clone()).collect();
    let resolve = |p: &[String]| -> Option<Module> {
        (1..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|m| modules.contains(m))
    };
    let mut out = BTreeSet::new();
    for f in files {
        let (paths, children) = paths_of(f);
        let me = &f.module;
        for (p, inline) in paths {
            let (base, rest): (Vec<String>, &[String]) = match p[0].as_str() {
                "crate" | "tfmount" => (vec![], &p[1..]),
                "self" => (me.clone(), &p[1..]),
                "super" => {
                    let supers = p.iter().take_while(|s| *s == "super").count();
                    let up = supers.saturating_sub(inline);
                    if up > me.len() {
                        continue;
                    }
                    (me[..me.len() - up].to_vec(), &p[supers..])
                }
                c if children.contains(c) => (me.clone(), &p[..]),
                _ => continue,
            };
            let full: Vec<String> = base.into_iter().chain(rest.iter().cloned()).collect();
            let Some(to) = resolve(&full) else { continue };
            let ancestor = to.len() <= me.len() && me[..to.len()] == to[..];
            if !ancestor {
                out.insert(Edge {
                    from: me.clone(),
                    to,
                    written: p.join("::"),
                });
            }
        }
    }
    out.into_iter().collect()
}

/// The cycles among `edges` (strongly connected components of more than one module).
fn cycles(edges: &[Edge]) -> Vec<Vec<Module>> {
    let mut next: BTreeMap<&Module, BTreeSet<&Module>> = BTreeMap::new();
    for e in edges {
        next.entry(&e.from).or_default().insert(&e.to);
        next.entry(&e.to).or_default();
    }
    let nodes: Vec<&Module> = next.keys().copied().collect();
    let index_of: BTreeMap<&Module, usize> =
        nodes.iter().enumerate().map(|(i, m)| (*m, i)).collect();
    // Tarjan, iterative.
    let n = nodes.len();
    let (mut index, mut low, mut on) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut counter) = (Vec::new(), Vec::new(), 0);
    for s in 0..n {
        if index[s] != usize::MAX {
            continue;
        }
        let mut work: Vec<(usize, Vec<usize>)> = Vec::new();
        let succ =
            |v: usize| -> Vec<usize> { next[nodes[v]].iter().map(|w| index_of[w]).collect() };
        index[s] = counter;
        low[s] = counter;
        counter += 1;
        stack.push(s);
        on[s] = true;
        work.push((s, succ(s)));
        while let Some((v, rest)) = work.last_mut() {
            let v = *v;
            if let Some(w) = rest.pop() {
                if index[w] == usize::MAX {
                    index[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w);
                    on[w] = true;
                    work.push((w, succ(w)));
                } else if on[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some((u, _)) = work.last() {
                    low[*u] = low[*u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on[w] = false;
                        comp.push(nodes[w].clone());
                        if w == v {
                            break;
                        }
                    }
                    if comp.len() > 1 {
                        comp.sort();
                        out.push(comp);
                    }
                }
            }
        }
    }
    out
}

/// The room of a module: its top-level module (`lib` for the crate root, `main` for the binary).
fn room(m: &[String]) -> &str {
    m.first().map_or("lib", |s| s.as_str())
}

/// The format folder a module is in (`formats::v2::checkpoint` → `v2`), if any: a module of
/// `formats` with children of its own, or inside one.
fn format_folder<'a>(m: &'a [String], folders: &BTreeSet<String>) -> Option<&'a str> {
    (m.len() >= 2 && m[0] == "formats" && folders.contains(&m[1])).then(|| m[1].as_str())
}

/// Everything wrong with `files` against `rooms`, one line each.
fn check(files: &[File], rooms: &Rooms) -> Vec<String> {
    let mut problems = Vec::new();
    let present: BTreeSet<&str> = files.iter().map(|f| room(&f.module)).collect();
    for r in &present {
        if !rooms.contains_key(*r) && *r != "lib" {
            problems.push(format!(
                "room `{r}` is not in the room map of docs/architecture.md"
            ));
        }
    }
    for r in rooms.keys() {
        if !present.contains(r.as_str()) {
            problems.push(format!(
                "the room map lists `{r}`, which is not a module of the crate"
            ));
        }
    }
    let folders: BTreeSet<String> = files
        .iter()
        .filter(|f| f.module.len() >= 3 && f.module[0] == "formats")
        .map(|f| f.module[1].clone())
        .collect();
    let all = edges(files);
    for e in &all {
        let (a, b) = (room(&e.from), room(&e.to));
        if a == "lib" || b == "lib" {
            continue;
        }
        if a != b {
            let (la, lb) = (
                rooms.get(a).copied().flatten(),
                rooms.get(b).copied().flatten(),
            );
            let up = match (rooms.get(a), rooms.get(b)) {
                // Test code may use anything, and any room's tests may use it.
                (Some(None), _) | (_, Some(None)) => false,
                _ => la.unwrap_or(0) <= lb.unwrap_or(0) && a != "main",
            };
            if up {
                problems.push(format!(
                    "{} (room `{a}`, layer {}) uses {} (room `{b}`, layer {}): a room may use only rooms of a lower layer",
                    show(&e.from),
                    la.unwrap_or(0),
                    e.written,
                    lb.unwrap_or(0)
                ));
            }
        }
        if let (Some(x), Some(y)) = (
            format_folder(&e.from, &folders),
            format_folder(&e.to, &folders),
        ) {
            if x != y {
                problems.push(format!(
                    "{} uses {}: format `{x}` names format `{y}` (formats share only the modules beside them in src/formats/)",
                    show(&e.from),
                    e.written
                ));
            }
        }
    }
    for c in cycles(&all) {
        let inside: Vec<String> = all
            .iter()
            .filter(|e| c.contains(&e.from) && c.contains(&e.to))
            .map(|e| format!("{} -> {} ({})", show(&e.from), show(&e.to), e.written))
            .collect();
        problems.push(format!(
            "cycle between {}: {}",
            c.iter().map(|m| show(m)).collect::<Vec<_>>().join(", "),
            inside.join("; ")
        ));
    }
    problems
}

/// The room map: the table under `## Rooms` in docs/architecture.md, `| layer | room | job |`,
/// `layer` a number or `test`.
fn room_map(doc: &str) -> Rooms {
    let mut rooms = Rooms::new();
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Rooms"))
        .expect("docs/architecture.md has a `## Rooms` section");
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 3 || !cells[1].starts_with('`') {
            continue;
        }
        let layer = match cells[0] {
            "test" => None,
            n => Some(
                n.parse::<u32>()
                    .unwrap_or_else(|_| panic!("layer `{n}` in: {line}")),
            ),
        };
        for name in cells[1].split(',').map(|n| n.trim().trim_matches('`')) {
            let name = name
                .trim_start_matches("src/")
                .trim_end_matches('/')
                .trim_end_matches(".rs");
            rooms.insert(name.to_string(), layer);
        }
    }
    rooms
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out
}

/// The crate's modules below `root` (`src/`), generated code left out.
fn crate_files(root: &Path) -> Vec<File> {
    let mut out = Vec::new();
    for p in rust_files(root) {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with("_generated.rs") {
            continue;
        }
        let rel = p.strip_prefix(root).unwrap().with_extension("");
        let mut module: Module = rel
            .iter()
            .map(|s| s.to_string_lossy().into_owned())
            .collect();
        if name == "main.rs" && module.len() == 1 {
            module = vec!["main".into()];
        } else if matches!(name.as_str(), "mod.rs" | "lib.rs") {
            module.pop();
        }
        out.push(File {
            module,
            text: std::fs::read_to_string(&p).unwrap(),
        });
    }
    out
}

#[test]
fn the_code_keeps_the_room_map() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let rooms = room_map(&doc);
    assert!(
        rooms.len() >= 10,
        "the room map lists {} rooms",
        rooms.len()
    );
    let files = crate_files(&root.join("src"));
    let problems = check(&files, &rooms);
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // What the check saw, so a parser that finds nothing cannot pass: the rooms use each other.
    let crossing = edges(&files)
        .iter()
        .filter(|e| room(&e.from) != room(&e.to))
        .count();
    assert!(crossing > 100, "only {crossing} uses between rooms found");
}

// The checker itself, on small trees.

fn file(module: &str, text: &str) -> File {
    let module: Module = if module.is_empty() {
        vec![]
    } else {
        module.split("::").map(String::from).collect()
    };
    File {
        module,
        text: text.into(),
    }
}

fn rooms(list: &[(&str, u32)]) -> Rooms {
    list.iter()
        .map(|(n, l)| (n.to_string(), Some(*l)))
        .collect()
}

#[test]
fn a_use_going_up_is_refused() {
    let r = rooms(&[("fs", 2), ("parse", 1)]);
    let ok = [
        file("", "pub mod fs; pub mod parse;"),
        file("fs", "use crate::parse::Table;"),
        file("parse", ""),
    ];
    assert_eq!(check(&ok, &r), Vec::<String>::new());
    let up = [
        file("", "pub mod fs; pub mod parse;"),
        file("fs", ""),
        file("parse", "fn f() { crate::fs::Fs::new(); }"),
    ];
    let p = check(&up, &r);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].contains("parse (room `parse`, layer 1) uses crate::fs::Fs::new"),
        "{p:?}"
    );
}

#[test]
fn a_cycle_is_refused_and_a_parent_is_not_one() {
    let r = rooms(&[("fs", 1)]);
    let cycle = [
        file("fs", "mod build; mod live;"),
        file("fs::build", "use super::live::Live;"),
        file("fs::live", "use super::{build::Builder, Fs};"),
    ];
    let p = check(&cycle, &r);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].starts_with("cycle between fs::build, fs::live"),
        "{p:?}"
    );
    // A child using its parent's items, and the parent using the child's, is no cycle.
    let family = [
        file("fs", "mod build; use build::Builder; pub struct Fs;"),
        file("fs::build", "use super::Fs; pub struct Builder;"),
    ];
    assert_eq!(check(&family, &r), Vec::<String>::new());
}

#[test]
fn a_format_naming_another_is_refused() {
    let r = rooms(&[("formats", 1)]);
    let files = [
        file("formats", "pub mod tensors; pub mod v1; pub mod v2;"),
        file("formats::tensors", ""),
        file("formats::v1", "pub mod set;"),
        file(
            "formats::v1::set",
            "use crate::formats::tensors::TensorSet; use crate::formats::v2::checkpoint::Caches;",
        ),
        file("formats::v2", "pub mod checkpoint;"),
        file("formats::v2::checkpoint", ""),
    ];
    let p = check(&files, &r);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("format `v1` names format `v2`"), "{p:?}");
}

#[test]
fn paths_in_comments_strings_and_inline_modules_are_read_right() {
    let f = file(
        "a::b",
        "// crate::x::y\n/* crate::x::z */ const S: &str = \"crate::x::w\";\n\
         mod tests { use super::*; use super::super::c::D; }\nfn f<'a>(c: char) { let _ = '\\''; crate::e::F; }\n\
         fn g() -> usize { std::mem::size_of::<crate::h::I>() }",
    );
    let (paths, _) = paths_of(&f);
    let written: Vec<String> = paths.iter().map(|(p, _)| p.join("::")).collect();
    assert_eq!(
        written,
        [
            "super",
            "super::super::c::D",
            "crate::e::F",
            "std::mem::size_of",
            "crate::h::I"
        ]
    );
}

/// The paths the table under `## Inside the rooms` names: in each row's second cell, the first
/// is a path from the project's root and the rest are beside it (`src/fs/graph.rs`, `text.rs`);
/// a path ending in `/` is a folder and covers what is in it.
fn mapped_paths(doc: &str) -> Vec<String> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Inside the rooms"))
        .expect("docs/architecture.md has an `## Inside the rooms` section");
    let mut out = Vec::new();
    for line in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 3 || !cells[1].starts_with('`') {
            continue;
        }
        let mut dir = String::new();
        for p in cells[1].split(',').map(|p| p.trim().trim_matches('`')) {
            if p.contains('/') {
                let cut = p.trim_end_matches('/').rfind('/').map_or(0, |i| i + 1);
                dir = p[..cut].to_string();
                out.push(p.to_string());
            } else {
                out.push(format!("{dir}{p}"));
            }
        }
    }
    out
}

/// The paths of the table beside the crate (section `## One crate`: `| path, path | job |`).
fn beside_paths(doc: &str) -> Vec<String> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("One crate"))
        .expect("docs/architecture.md has an `## One crate` section");
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            l.trim_matches('|')
                .split('|')
                .next()
                .unwrap_or("")
                .split(',')
        })
        .map(|p| p.trim().trim_matches('`').to_string())
        .collect()
}

#[test]
fn every_source_file_is_in_the_map_and_every_mapped_path_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let mapped = mapped_paths(&doc);
    assert!(mapped.len() > 40, "the map names {} paths", mapped.len());
    // Beside the crate: every test binary (a suite's directory, or a file of `tests/`) is named.
    let beside = beside_paths(&doc);
    let mut binaries = Vec::new();
    for e in std::fs::read_dir(root.join("tests")).unwrap().flatten() {
        let p = e.path();
        if p.join("main.rs").is_file() {
            binaries.push(format!("tests/{}/", e.file_name().to_string_lossy()));
        } else if p.extension().is_some_and(|x| x == "rs") {
            binaries.push(format!("tests/{}", e.file_name().to_string_lossy()));
        }
    }
    binaries.sort();
    assert!(binaries.len() > 1, "{binaries:?}");
    let unnamed: Vec<&String> = binaries.iter().filter(|b| !beside.contains(b)).collect();
    assert!(
        unnamed.is_empty(),
        "test binaries docs/architecture.md does not name beside the crate: {unnamed:?}"
    );
    let missing: Vec<&String> = mapped
        .iter()
        .chain(&beside)
        .filter(|p| !root.join(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "the map names paths that do not exist: {missing:?}"
    );
    let mut unmapped = Vec::new();
    for p in rust_files(&root.join("src")) {
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let covered = mapped
            .iter()
            .any(|m| *m == rel || (m.ends_with('/') && rel.starts_with(m.as_str())));
        if !covered {
            unmapped.push(rel);
        }
    }
    unmapped.sort();
    assert!(
        unmapped.is_empty(),
        "files docs/architecture.md does not map: {unmapped:?}"
    );
}
