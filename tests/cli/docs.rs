//! The documentation holds together: every relative link of `README.md` and `docs/*.md` leads to
//! a file of the repository, and every `#anchor` to a heading of its page (GitHub's anchor rule);
//! every page of `docs/` is linked from both indexes; the README stays short (under 10 KiB);
//! every `tfmount` command line of their shell examples is one the command line accepts
//! ([`example_command_lines_parse`]); and the README's opening transcript, run for real on the
//! bundled demo, prints what the README shows ([`the_readme_transcript_is_real`]).
//!
//! Links are Markdown's inline `[text](dest)` and `![alt](dest)` and reference definitions
//! `[label]: dest`, outside fenced code blocks and code spans. A link with a scheme (`https:`,
//! `mailto:`) is not followed.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{requires, Mount};

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
         run TFMOUNT_BLESS=1 cargo test --test cli docs:: and commit docs/cli.md"
    );
}

// ---------------------------------------------------------------------------------------------
// The examples: code blocks, shell lines, tfmount command lines
// ---------------------------------------------------------------------------------------------

/// A code block of a page: its info string (`sh`, `console`, `text`, `python`, ...; empty for a
/// fence without one and for an indented block) and its lines, each with its 1-based number.
struct Block {
    info: String,
    lines: Vec<(usize, String)>,
}

/// The code blocks of a Markdown text: fenced ones (also indented, inside a list item), and
/// indented ones: a run of lines indented by four spaces or a tab, outside a fence, whose first
/// line follows a blank line.
fn code_blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut fenced: Option<Block> = None;
    let mut indented: Option<Block> = None;
    let mut prev_blank = true;
    for (i, l) in text.lines().enumerate() {
        if is_fence(l) {
            out.extend(indented.take());
            match fenced.take() {
                Some(b) => out.push(b),
                None => {
                    fenced = Some(Block {
                        info: l
                            .trim_start()
                            .trim_start_matches(['`', '~'])
                            .trim()
                            .to_string(),
                        lines: Vec::new(),
                    })
                }
            }
            prev_blank = false;
            continue;
        }
        if let Some(b) = &mut fenced {
            b.lines.push((i + 1, l.to_string()));
            continue;
        }
        let blank = l.trim().is_empty();
        let code = !blank && (l.starts_with("    ") || l.starts_with('\t'));
        if code && (prev_blank || indented.is_some()) {
            indented
                .get_or_insert_with(|| Block {
                    info: String::new(),
                    lines: Vec::new(),
                })
                .lines
                .push((i + 1, l.to_string()));
        } else if !blank {
            out.extend(indented.take());
        }
        prev_blank = blank;
    }
    out.extend(indented);
    out
}

/// Whether a block with this info string holds shell commands: `sh`, `console`, `bash`,
/// `shell`, or none. Not `text` (the `--help` texts docs/cli.md generates, and other output),
/// `python`, `yaml`.
fn is_shell(info: &str) -> bool {
    matches!(
        info.split_whitespace().next().unwrap_or(""),
        "" | "sh" | "console" | "bash" | "shell"
    )
}

/// Whether a line of a block is a prompt line `$ COMMAND`.
fn is_prompt(line: &str) -> bool {
    line.trim_start().starts_with("$ ")
}

/// Whether `line` is one of tfmount's messages, which it prints and no one types: `tfmount: ...`,
/// `tfmount SUBCOMMAND: ...`.
fn is_message(line: &str) -> bool {
    let mut w = line.split_whitespace();
    match (w.next(), w.next()) {
        (Some("tfmount:"), _) => true,
        (Some("tfmount"), Some(s)) => s.len() > 1 && s.ends_with(':') && !s.contains('/'),
        _ => false,
    }
}

/// One command of a shell block: the line it starts on, the command (a line ending in `\` joined
/// with the next), and the output a transcript shows after it.
struct Step {
    line: usize,
    cmd: String,
    shown: Vec<String>,
}

/// The commands of a shell block. In a transcript (a block with `$ ` lines) the `$ ` lines,
/// each with the lines up to the next as its output; else every line but blank ones, comments
/// and tfmount's own messages ([`is_message`]).
fn steps(block: &Block) -> Vec<Step> {
    let transcript = block.lines.iter().any(|(_, l)| is_prompt(l));
    let mut out: Vec<Step> = Vec::new();
    let mut continued = false;
    for (n, l) in &block.lines {
        let t = l.trim();
        if continued {
            if let Some(s) = out.last_mut() {
                s.cmd.push(' ');
                s.cmd.push_str(t.trim_end_matches('\\').trim());
            }
            continued = t.ends_with('\\');
            continue;
        }
        let cmd = if transcript {
            match t.strip_prefix("$ ") {
                Some(c) => c.trim(),
                None => {
                    if let Some(s) = out.last_mut() {
                        s.shown.push(l.to_string());
                    }
                    continue;
                }
            }
        } else {
            t
        };
        if cmd.is_empty() || cmd.starts_with('#') || is_message(cmd) {
            continue;
        }
        continued = cmd.ends_with('\\');
        out.push(Step {
            line: *n,
            cmd: cmd.trim_end_matches('\\').trim_end().to_string(),
            shown: Vec::new(),
        });
    }
    out
}

/// Ends the word being read: kept, or dropped when it is a redirection's target.
fn end_word(word: &mut Option<String>, words: &mut Vec<String>, target: &mut bool) {
    if let Some(w) = word.take() {
        if !std::mem::take(target) {
            words.push(w);
        }
    }
}

/// A shell line split as sh splits it into simple commands (at `|`, `||`, `&&`, `;`, `&`), each
/// a list of words: quotes removed, a `#` comment dropped, redirections (`> k.npy`, `2>&1`,
/// `3<&-`, `< in`) dropped with their targets. Nothing is expanded: `$VAR` stays as written.
fn shell_split(line: &str) -> Vec<Vec<String>> {
    let mut segments = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut target = false;
    let mut it = line.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            ' ' | '\t' => end_word(&mut word, &mut words, &mut target),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for d in it.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    w.push(d);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(d) = it.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = it.next() {
                                if !matches!(e, '"' | '\\' | '$' | '`') {
                                    w.push('\\');
                                }
                                w.push(e);
                            }
                        }
                        d => w.push(d),
                    }
                }
            }
            '\\' => {
                if let Some(e) = it.next() {
                    word.get_or_insert_with(String::new).push(e);
                }
            }
            '#' if word.is_none() => break,
            '|' | '&' | ';' => {
                end_word(&mut word, &mut words, &mut target);
                if c != ';' && it.peek() == Some(&c) {
                    it.next();
                }
                if !words.is_empty() {
                    segments.push(std::mem::take(&mut words));
                }
            }
            '>' | '<' => {
                // A descriptor number written before it (`2>`, `3<`) is part of it.
                let fd = word
                    .as_deref()
                    .is_some_and(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()));
                if fd {
                    word = None;
                } else {
                    end_word(&mut word, &mut words, &mut target);
                }
                while matches!(it.peek(), Some('>' | '<')) {
                    it.next();
                }
                if it.peek() == Some(&'&') {
                    // To a descriptor (`2>&1`) or closing one (`3<&-`): no target word.
                    it.next();
                    while it.peek().is_some_and(|d| d.is_ascii_digit() || *d == '-') {
                        it.next();
                    }
                } else {
                    target = true;
                }
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    end_word(&mut word, &mut words, &mut target);
    if !words.is_empty() {
        segments.push(words);
    }
    segments
}

/// Whether a word names the tfmount program: `tfmount`, or a path ending in `/tfmount`.
fn is_tfmount(word: &str) -> bool {
    word == "tfmount" || word.ends_with("/tfmount")
}

/// Whether a word is a shell assignment `NAME=value` (before a command's program).
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// `words` (a tfmount command line) as a command line to parse, placeholders aside: the
/// program named `tfmount`; a word `...` (more of the same) dropped; an optional part of a
/// synopsis, `[...]` (`[-l]`, `[--threads N]`, `[OPTIONS]`), dropped. Other placeholders
/// (`SOURCE`, `PATH...`, `model/`, `$VAR`, `gs://bucket/...`) are kept: each stands for one
/// argument, and a path parses whatever it is.
fn without_placeholders(words: &[String]) -> Vec<String> {
    let mut out = vec!["tfmount".to_string()];
    let mut depth = 0usize;
    for w in words.iter().skip(1) {
        if depth > 0 || w.starts_with('[') {
            depth = (depth + w.matches('[').count()).saturating_sub(w.matches(']').count());
            continue;
        }
        if w != "..." && w != "…" {
            out.push(w.clone());
        }
    }
    out
}

/// Adds the tfmount command lines of one simple command `words` to `out`: the command itself
/// when its program (after `NAME=value` assignments) is tfmount, and then also the COMMAND of
/// `tfmount mount-helper ... -- COMMAND`; the command a wrapper runs (`exec`, `env`, `sudo`,
/// `nohup`, `setpriv`, `docker`: from its first word that is tfmount on); the `-c` line of `sh`,
/// `bash` and `capsh`. Any other program's words are not looked into (`mount -t fuse.tfmount
/// ... tfmount /mnt/m`: there `tfmount` names the file system).
fn command_lines(words: &[String], out: &mut Vec<Vec<String>>) {
    let words = &words[words.iter().take_while(|w| is_assignment(w)).count()..];
    let Some(program) = words.first() else {
        return;
    };
    if is_tfmount(program) {
        let argv = without_placeholders(words);
        if argv.get(1).is_some_and(|w| w == "mount-helper") {
            if let Some(k) = argv.iter().position(|w| w == "--") {
                command_lines(&argv[k + 1..], out);
            }
        }
        out.push(argv);
        return;
    }
    match program.rsplit('/').next().unwrap_or(program) {
        "exec" | "env" | "sudo" | "nohup" | "setpriv" | "docker" => {
            if let Some(k) = words.iter().skip(1).position(|w| is_tfmount(w)) {
                command_lines(&words[k + 1..], out);
            }
        }
        "sh" | "bash" | "capsh" => {
            if let Some(line) = words
                .iter()
                .position(|w| w == "-c")
                .and_then(|k| words.get(k + 1))
            {
                for segment in shell_split(line) {
                    command_lines(&segment, out);
                }
            }
        }
        _ => {}
    }
}

/// The tfmount command lines of a shell line (see [`shell_split`] and [`command_lines`]).
fn tfmount_lines(line: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for segment in shell_split(line) {
        command_lines(&segment, &mut out);
    }
    out
}

/// Every `tfmount` command line of the examples of `README.md` and `docs/*.md` is one the
/// program accepts, parsed by its own definitions without running (`tfmount::cli::reference::
/// check`): the subcommand (or the mount form), each flag, the number of arguments, and every
/// mount option given with `-o` (or a flag standing for one) known to the option table
/// (`src/options.rs`) with a value of its grammar. An example that a change of the command line
/// breaks fails here, naming its page and line, instead of failing its reader.
///
/// Which lines: those of shell code blocks, fenced as `sh`, `console`, `bash`, `shell` or with no
/// info string, and indented code blocks ([`code_blocks`]); not `text` blocks (docs/cli.md's
/// generated `--help` texts, and output), `python` or `yaml`. In a transcript (a block with `$ `
/// lines) the `$ ` lines are the commands and the rest is output; elsewhere every line but
/// comments and tfmount's own messages (`tfmount: ...`, `tfmount ls: ...`). A line is split as
/// sh splits it ([`shell_split`]): at `|`, `||`, `&&`, `;` and `&`, comments and redirections
/// dropped, so `tfmount cat m/ k.npy > k.npy` and `cd x && tfmount diff a b | grep M` check the
/// tfmount part. Its tfmount commands are found as [`command_lines`] says (also behind
/// `setpriv`, `exec`, `docker run`, `sh -c`, and a `mount-helper`'s COMMAND). Placeholders
/// ([`without_placeholders`]): `...` and optional `[...]` parts are dropped, other placeholders
/// (`SOURCE`, `model/`, `$VAR`) kept as one argument each.
#[test]
fn example_command_lines_parse() {
    let mut checked = 0;
    let mut errs = Vec::new();
    for page in pages() {
        for block in code_blocks(&read(&page)) {
            if !is_shell(&block.info) {
                continue;
            }
            for step in steps(&block) {
                for argv in tfmount_lines(&step.cmd) {
                    checked += 1;
                    let args: Vec<OsString> = argv.iter().map(OsString::from).collect();
                    if let Err(e) = tfmount::cmd::check_line(&args) {
                        // clap's message up to its usage line, on one line.
                        let e = e.split("\n\n").next().unwrap_or("");
                        let e = e.split_whitespace().collect::<Vec<_>>().join(" ");
                        errs.push(format!(
                            "{}:{}: {}\n    {e}",
                            page.display(),
                            step.line,
                            argv.join(" ")
                        ));
                    }
                }
            }
        }
    }
    assert!(
        errs.is_empty(),
        "{} example command lines that tfmount refuses (README.md, docs/*.md):\n{}",
        errs.len(),
        errs.join("\n")
    );
    assert!(checked >= 80, "only {checked} tfmount command lines found");
}

/// The reader of the examples takes from a shell line what sh would run: pipes, `&&`, `;` and
/// `&` split it, quotes are removed, comments and redirections (`> k.npy`, `2>&1`, `3<&-`) are
/// dropped; tfmount is found behind wrappers, `sh -c` and a `mount-helper`'s `--` but not as
/// `mount`'s file system name; synopsis placeholders are dropped as documented; a transcript's
/// `$ ` lines are commands and the rest their output. So [`example_command_lines_parse`] checks
/// the words a reader would type, no more and no fewer.
#[test]
fn the_example_reader_reads_shell_as_sh_does() {
    let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        shell_split("tfmount cat m/ 'a b.npy' > k.npy 2>&1 | head -c 10 # a comment | x"),
        [
            w(&["tfmount", "cat", "m/", "a b.npy"]),
            w(&["head", "-c", "10"])
        ]
    );
    assert_eq!(
        shell_split("exec 3<>/dev/fuse; cd \"x y\" && a || b & c 3<&- d"),
        [
            w(&["exec"]),
            w(&["cd", "x y"]),
            w(&["a"]),
            w(&["b"]),
            w(&["c", "d"])
        ]
    );
    assert_eq!(
        tfmount_lines(
            "tfmount mount-helper /m -- setpriv --reuid 1 ... tfmount -f model/ /dev/fd/3"
        ),
        [
            w(&["tfmount", "-f", "model/", "/dev/fd/3"]),
            w(&[
                "tfmount",
                "mount-helper",
                "/m",
                "--",
                "setpriv",
                "--reuid",
                "1",
                "tfmount",
                "-f",
                "model/",
                "/dev/fd/3"
            ]),
        ]
    );
    assert_eq!(
        tfmount_lines("X=1 ./target/release/tfmount ls [-l] [--threads N] SRC [PATH] PATH..."),
        [w(&["tfmount", "ls", "SRC", "PATH..."])]
    );
    assert_eq!(
        tfmount_lines("capsh --drop=x -- -c 'exec tfmount m/ /dev/fd/$FD'"),
        [w(&["tfmount", "m/", "/dev/fd/$FD"])]
    );
    assert!(tfmount_lines("mount -t fuse.tfmount -o fd=3 tfmount /mnt/m").is_empty());
    assert!(tfmount_lines("TFMOUNT_BEFORE=/old/tfmount scripts/bench.sh").is_empty());
    let block = Block {
        info: String::new(),
        lines: [
            "$ tfmount a \\",
            "    /m # c",
            "out",
            "$ ls",
            "tfmount: a message",
            "x",
        ]
        .iter()
        .enumerate()
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect(),
    };
    let s = steps(&block);
    assert_eq!(s.len(), 2);
    assert_eq!((s[0].line, s[0].cmd.as_str()), (1, "tfmount a /m # c"));
    assert_eq!(s[0].shown, ["out"]);
    assert_eq!(s[1].shown, ["tfmount: a message", "x"]);
    let plain = Block {
        info: "sh".into(),
        lines: vec![
            (1, "# c".into()),
            (2, "tfmount ls: timed out".into()),
            (3, "tfmount list".into()),
        ],
    };
    assert_eq!(steps(&plain).len(), 1);
    let blocks =
        code_blocks("a\n\n    tfmount x\n\n    y\nb\n  ```sh\n  z\n  ```\n- item\n    more\n");
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].lines.len(), 2);
    assert_eq!((blocks[1].info.as_str(), blocks[1].lines.len()), ("sh", 1));
}

// ---------------------------------------------------------------------------------------------
// The README's transcript, run
// ---------------------------------------------------------------------------------------------

/// Whether a word of shown output stands for what is left out.
fn is_ellipsis(w: &str) -> bool {
    w == "..." || w == "…"
}

/// `text` with each line's runs of whitespace made one space, trimmed, blank lines dropped.
fn normalized(text: &str) -> String {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether output `got` is what `shown` shows: equal once [`normalized`], where a `...` of
/// `shown` stands for any text (within a line or over lines).
fn shows(shown: &str, got: &str) -> bool {
    let pattern = normalized(&shown.replace('…', "..."));
    let got = normalized(got);
    let parts: Vec<&str> = pattern.split("...").collect();
    let (first, last) = match parts.as_slice() {
        [only] => return *only == got,
        [first, .., last] => (*first, *last),
        [] => return got.is_empty(),
    };
    if got.len() < first.len() + last.len() || !got.starts_with(first) || !got.ends_with(last) {
        return false;
    }
    let mut rest = &got[first.len()..got.len() - last.len()];
    for p in &parts[1..parts.len() - 1] {
        match rest.find(p) {
            Some(k) => rest = &rest[k + p.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the names `ls` printed (`got`, one a line) are those `shown` shows in columns: the
/// same set, or with a `...` among them, a set including the ones shown.
fn same_names(shown: &str, got: &str) -> bool {
    let want: BTreeSet<&str> = shown
        .split_whitespace()
        .filter(|w| !is_ellipsis(w))
        .collect();
    let have: BTreeSet<&str> = got.split_whitespace().collect();
    if shown.split_whitespace().any(is_ellipsis) {
        want.is_subset(&have)
    } else {
        want == have
    }
}

/// The modules a `python -c CODE` command imports (`import a, b`, `from c.d import e`), as an
/// `import` statement lists them.
fn python_imports(words: &[String]) -> String {
    let code = words
        .iter()
        .position(|w| w == "-c")
        .and_then(|k| words.get(k + 1))
        .map(String::as_str)
        .unwrap_or("");
    let mut modules = Vec::new();
    for stmt in code.split([';', '\n']).map(str::trim) {
        if let Some(list) = stmt.strip_prefix("import ") {
            modules.extend(list.split(',').filter_map(|m| m.split_whitespace().next()));
        } else if let Some(from) = stmt.strip_prefix("from ") {
            modules.extend(from.split_whitespace().next());
        }
    }
    modules.join(", ")
}

/// `s` quoted for sh.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The README's opening transcript is real: its first code block, run on a mount of the bundled
/// demo, prints what the README shows. The first command, `tfmount [OPTIONS] SOURCE MOUNTPOINT`,
/// is done as the other mounting tests do it (`Mount::start`: the same options, in the
/// foreground, on a fresh mount point); every later `$ ` command is run by sh in the repository
/// with MOUNTPOINT (`/mnt/m`) replaced by the test's mount point, `tfmount` by the built binary
/// and `python` by the Python `requires` finds (`$TFMOUNT_PYTHON` first) that imports what the
/// command imports: without one, that command is skipped with a note, as other tests skip. Each
/// must exit 0 and print what the README shows after it: compared with runs of whitespace as one
/// space and blank lines left out, a `...` shown standing for any text; an `ls` (without `-l`),
/// which prints columns on a terminal and one name a line here, by its set of names (with a
/// `...`, those shown must be among them). The transcript ends unmounting: the daemon must then
/// exit 0. So the first thing a reader sees is what they will get.
#[test]
fn the_readme_transcript_is_real() {
    if !requires::fuse("") {
        return;
    }
    let page = "README.md";
    let blocks = code_blocks(&read(Path::new(page)));
    let block = blocks.first().expect("README.md has a code block");
    let steps = steps(block);
    let (mount, rest) = steps
        .split_first()
        .expect("the README's transcript has commands");
    assert!(
        rest.len() >= 6,
        "{page}:{}: the transcript has {} commands",
        mount.line,
        steps.len()
    );
    let words = shell_split(&mount.cmd).concat();
    assert!(
        words.len() >= 3 && words[0] == "tfmount",
        "{page}:{}: the transcript starts with a mount, tfmount [OPTIONS] SOURCE MOUNTPOINT: {}",
        mount.line,
        mount.cmd
    );
    let args: Vec<OsString> = words.iter().map(OsString::from).collect();
    tfmount::cmd::check_line(&args).unwrap_or_else(|e| panic!("{page}:{}: {e}", mount.line));
    let (mountpoint, source) = (&words[words.len() - 1], &words[words.len() - 2]);
    let options: Vec<&str> = words[1..words.len() - 2]
        .iter()
        .map(String::as_str)
        .collect();
    let mut m = Mount::start(&root().join(source), &options);
    let mp = m.path();
    let mp = mp.to_str().expect("a UTF-8 temporary path");
    let bin = sh_quote(env!("CARGO_BIN_EXE_tfmount"));
    let mut errs = Vec::new();
    let mut ran = 0;
    for step in rest {
        let words = shell_split(&step.cmd).concat();
        let program = words.first().map(String::as_str).unwrap_or("");
        let rest_of_line = step
            .cmd
            .trim_start()
            .strip_prefix(program)
            .unwrap_or_else(|| {
                panic!(
                    "{page}:{}: {} does not start with its program",
                    step.line, step.cmd
                )
            });
        let run = match program {
            "python" | "python3" => {
                let Some(py) = requires::python(&python_imports(&words), "") else {
                    continue;
                };
                format!("{}{rest_of_line}", sh_quote(&py.to_string_lossy()))
            }
            "tfmount" => format!("{bin}{rest_of_line}"),
            _ => step.cmd.clone(),
        };
        let run = run.replace(mountpoint.as_str(), mp);
        let out = Command::new("sh")
            .arg("-c")
            .arg(&run)
            .current_dir(root())
            .stdin(Stdio::null())
            .output()
            .expect("run sh");
        ran += 1;
        let got = String::from_utf8_lossy(&out.stdout);
        let shown = step.shown.join("\n");
        let ls = program == "ls" && !words.iter().any(|w| w.starts_with('-') && w.contains('l'));
        let same = if ls {
            same_names(&shown, &got)
        } else {
            shows(&shown, &got)
        };
        if !out.status.success() || !same {
            errs.push(format!(
                "{page}:{}: $ {}\n  ran: {run}\n  status: {}\n  the README shows:\n{shown}\n  it printed:\n{got}{}",
                step.line,
                step.cmd,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let code = m.unmount();
    assert!(
        errs.is_empty(),
        "README.md's transcript: {} of its commands do not do what it shows:\n\n{}",
        errs.len(),
        errs.join("\n\n")
    );
    assert_eq!(
        code,
        Some(0),
        "the daemon's exit status after the transcript; its log: {}",
        m.log_text()
    );
    assert!(ran >= 4, "only {ran} of the transcript's commands ran");
}

/// The transcript's comparisons are as [`the_readme_transcript_is_real`] says: whitespace runs and
/// blank lines do not count, `...` stands for any text, `ls` names are a set (a subset with
/// `...`), and a `python -c` command needs a Python with the modules it imports. So a wrong
/// output fails and a reflowed one does not.
#[test]
fn transcript_output_is_compared_as_documented() {
    assert!(shows("a  b\n\n  c ", "a b\nc\n"));
    assert!(shows("[[1 ...]]\n...\nend", "[[1 2 3]]\nx\ny\nend"));
    assert!(!shows("a\nb", "a\nb\nc"));
    assert!(!shows("a...b", "ab2"));
    assert!(shows("x ...", "x y z"));
    assert!(same_names("b  a\nc", "a\nb\nc\n"));
    assert!(!same_names("b  a", "a\nb\nc\n"));
    assert!(same_names("a ... c", "a\nb\nc\nd\n"));
    assert!(!same_names("a ... e", "a\nb\nc\nd\n"));
    let w = |s: &str| shell_split(s).concat();
    assert_eq!(
        python_imports(&w(
            "python -c \"import numpy, json; from safetensors.numpy import load_file; print(1)\""
        )),
        "numpy, json, safetensors.numpy"
    );
}
