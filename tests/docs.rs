//! The documentation holds together: every relative link of `README.md` and `docs/*.md` leads to
//! a file of the repository, and every `#anchor` to a heading of its page (GitHub's anchor rule);
//! every page of `docs/` is linked from both indexes; the README stays short (under 10 KiB).
//!
//! Links are Markdown's inline `[text](dest)` and `![alt](dest)` and reference definitions
//! `[label]: dest`, outside fenced code blocks and code spans. A link with a scheme (`https:`,
//! `mailto:`) is not followed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The README's ceiling: what it is for fits on a screen or two; the reference lives in `docs/`.
const README_MAX: usize = 10 * 1024;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every `docs/*.md`, as paths relative to the repository.
fn pages() -> Vec<PathBuf> {
    let mut out = vec![PathBuf::from("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| Path::new("docs").join(p.file_name().expect("a name")))
        .collect();
    docs.sort();
    assert!(docs.len() >= 10, "docs/ holds only {docs:?}");
    out.extend(docs);
    out
}

fn read(rel: &Path) -> String {
    let p = root().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Whether `line` opens or closes a fenced code block (also indented, inside a list item).
fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut in_code = false;
    let mut out = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if is_fence(l) {
            in_code = !in_code;
        } else if !in_code {
            out.push((i + 1, l));
        }
    }
    out
}

/// The link destinations of one line: inline links and images outside code spans, and a
/// reference definition.
fn links_in(line: &str) -> Vec<String> {
    let t = line.trim_start();
    if let Some(inner) = t.strip_prefix('[') {
        if let Some((label, rest)) = inner.split_once("]:") {
            if !label.contains(']') {
                let dest = rest.split_whitespace().next().unwrap_or("");
                return vec![dest
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()];
            }
        }
    }
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'`' {
            // A code span: skip to the closing run of as many backticks (none: a literal run).
            let n = b[i..].iter().take_while(|&&c| c == b'`').count();
            let mut j = i + n;
            let mut close = None;
            while j < b.len() {
                if b[j] == b'`' {
                    let m = b[j..].iter().take_while(|&&c| c == b'`').count();
                    if m == n {
                        close = Some(j + m);
                        break;
                    }
                    j += m;
                } else {
                    j += 1;
                }
            }
            i = close.unwrap_or(i + n);
            continue;
        }
        if b[i] == b']' && b.get(i + 1) == Some(&b'(') {
            let start = i + 2;
            let (dest, end) = if b.get(start) == Some(&b'<') {
                let close = line[start..]
                    .find('>')
                    .map(|k| start + k)
                    .unwrap_or(b.len());
                (&line[start + 1..close], close)
            } else {
                let mut depth = 0usize;
                let mut k = start;
                while k < b.len() {
                    match b[k] {
                        b'(' => depth += 1,
                        b')' if depth == 0 => break,
                        b')' => depth -= 1,
                        c if c.is_ascii_whitespace() => break,
                        _ => {}
                    }
                    k += 1;
                }
                (&line[start..k], k)
            };
            out.push(dest.to_string());
            i = end;
            continue;
        }
        i += 1;
    }
    out
}

/// GitHub's anchor of a heading: the rendered text (code spans and links by their text),
/// lowercased, every character but letters, digits, spaces, `-` and `_` removed, each space
/// replaced by `-`.
fn slug(heading: &str) -> String {
    // A link in a heading counts by its text.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(k) = rest.find("](") {
        let after = &rest[k + 2..];
        let close = after.find(')').unwrap_or(after.len());
        text.push_str(&rest[..k]);
        rest = &after[(close + 1).min(after.len())..];
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings, in GitHub's way: a repeated slug gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, l) in prose(text) {
        let hashes = l.bytes().take_while(|&c| c == b'#').count();
        if !(1..=6).contains(&hashes) || !l[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(l[hashes..].trim().trim_end_matches('#').trim());
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Whether `dest` leaves the repository's files (a URL or an e-mail address).
fn has_scheme(dest: &str) -> bool {
    match dest.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && !scheme.contains('/')
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

/// Every broken relative link of `page` (relative to the repository), one line each.
fn broken_links(page: &Path) -> (usize, Vec<String>) {
    let text = read(page);
    let dir = page.parent().unwrap_or(Path::new(""));
    let repo = root().canonicalize().expect("the repository");
    let mut checked = 0;
    let mut errs = Vec::new();
    for (n, line) in prose(&text) {
        for dest in links_in(line) {
            if dest.is_empty() || has_scheme(&dest) {
                continue;
            }
            checked += 1;
            let at = format!("{}:{n}: ({dest})", page.display());
            let (file, anchor) = match dest.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (dest.as_str(), None),
            };
            let target = if file.is_empty() {
                page.to_path_buf()
            } else {
                dir.join(file)
            };
            let full = root().join(&target);
            match full.canonicalize() {
                Err(e) => {
                    errs.push(format!("{at}: {}: {e}", target.display()));
                    continue;
                }
                Ok(c) if !c.starts_with(&repo) => {
                    errs.push(format!("{at}: leads outside the repository"));
                    continue;
                }
                Ok(_) => {}
            }
            let Some(anchor) = anchor else { continue };
            if full.extension().is_none_or(|x| x != "md") {
                errs.push(format!("{at}: an anchor into a file that is not Markdown"));
                continue;
            }
            let have = anchors(&std::fs::read_to_string(&full).unwrap_or_default());
            if !have.contains(anchor) {
                errs.push(format!(
                    "{at}: {} has no heading with the anchor #{anchor} (it has: {})",
                    target.display(),
                    have.iter().cloned().collect::<Vec<_>>().join(" ")
                ));
            }
        }
    }
    (checked, errs)
}

#[test]
fn relative_links_resolve() {
    let mut errs = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let (n, e) = broken_links(&page);
        checked += n;
        errs.extend(e);
    }
    assert!(
        errs.is_empty(),
        "{} broken links:\n{}",
        errs.len(),
        errs.join("\n")
    );
    assert!(checked >= 50, "only {checked} relative links found");
}

#[test]
fn readme_is_short() {
    let len = read(Path::new("README.md")).len();
    assert!(
        len < README_MAX,
        "README.md is {len} bytes, over {README_MAX}: move reference text into docs/"
    );
}

#[test]
fn every_docs_page_is_linked_from_both_indexes() {
    for index in ["README.md", "docs/README.md"] {
        let text = read(Path::new(index));
        let dir = Path::new(index).parent().unwrap_or(Path::new(""));
        let linked: BTreeSet<PathBuf> = prose(&text)
            .iter()
            .flat_map(|(_, l)| links_in(l))
            .filter(|d| !has_scheme(d))
            .map(|d| {
                let file = d.split('#').next().unwrap_or("").to_string();
                normalize(&dir.join(file))
            })
            .collect();
        for page in pages().into_iter().skip(1) {
            if page == Path::new(index) {
                continue;
            }
            assert!(
                linked.contains(&page),
                "{index} does not link to {}",
                page.display()
            );
        }
    }
}

/// `a/./b/../c` as `a/c`, without touching the file system.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

#[test]
fn the_link_checker_reads_markdown_as_github_does() {
    // Anchors of headings as GitHub renders them.
    for (heading, want) in [
        (
            "Object storage: `s3://`, `gs://`, `https://`",
            "object-storage-s3-gs-https",
        ),
        (
            "`tfmount verify`: is this download complete and intact?",
            "tfmount-verify-is-this-download-complete-and-intact",
        ),
        ("Names users know (TF2)", "names-users-know-tf2"),
        (
            "Views: text, statistics, safetensors, tables",
            "views-text-statistics-safetensors-tables",
        ),
        ("snake_case and-dash", "snake_case-and-dash"),
        ("See [Sources](sources.md) first", "see-sources-first"),
    ] {
        assert_eq!(slug(heading), want, "{heading:?}");
    }
    let a = anchors("# Exit codes\n```\n# not a heading\n```\n## Exit codes\n#not one either\n");
    assert_eq!(
        a,
        ["exit-codes", "exit-codes-1"].map(String::from).into(),
        "repeated headings"
    );
    // Links: inline, images, reference definitions; not in code spans; titles dropped.
    assert_eq!(
        links_in("a [b](x.md#y) `[c](no.md)` ![i](img.png \"t\") [d](<sp ace.md>) [e](f(1).md)"),
        ["x.md#y", "img.png", "sp ace.md", "f(1).md"]
    );
    assert_eq!(links_in("[label]: docs/x.md \"title\""), ["docs/x.md"]);
    assert!(links_in("`` a ](b) ``  [`code` text](ok.md)") == ["ok.md"]);
    assert!(has_scheme("https://x") && has_scheme("mailto:a@b") && !has_scheme("docs/a.md#b:c"));
    assert_eq!(prose("a\n  ```\n  [x](y)\n  ```\nb").len(), 2);
}

/// The generated block of docs/cli.md is exactly what the command line definitions render
/// (`tfmount::cli::reference::markdown`): the options table and every `--help`. With
/// `TFMOUNT_BLESS=1` the test rewrites the block instead of failing.
#[test]
fn cli_reference_is_generated_from_the_command_line() {
    const BEGIN: &str = "<!-- BEGIN GENERATED: tfmount --help -->\n";
    const END: &str = "<!-- END GENERATED -->";
    let path = root().join("docs/cli.md");
    let text = std::fs::read_to_string(&path).expect("docs/cli.md");
    let a = text
        .find(BEGIN)
        .expect("docs/cli.md has the BEGIN GENERATED marker")
        + BEGIN.len();
    let b = text[a..]
        .find(END)
        .expect("docs/cli.md has the END GENERATED marker")
        + a;
    let want = format!("\n{}\n", tfmount::cli::reference::markdown());
    if text[a..b] == want {
        return;
    }
    if std::env::var_os("TFMOUNT_BLESS").is_some() {
        std::fs::write(&path, format!("{}{want}{}", &text[..a], &text[b..])).expect("write");
        return;
    }
    panic!(
        "docs/cli.md's generated block differs from what the command line renders: \
         run TFMOUNT_BLESS=1 cargo test --test docs and commit docs/cli.md"
    );
}
