//! The layout contract, executed. At test time this reads `docs/layout.md`, takes the code
//! block under "## The layout contract" (one `MOUNT/...` line per file kind), the `.npy` dtype
//! list of its "Dtypes" bullet, the "Strings" bullet, and the numbered rules of "### Name
//! escaping" with their examples, and checks each against mounts in the filesystem core (`Fs`,
//! no kernel):
//!
//! * every tensor of TensorFlow-written fixtures has exactly the files the block lists (no
//!   more: a file kind the page drops fails here), `.npy` only for the dtypes the page names;
//! * each line's description is checked as stated: `.bin` is numpy's `tobytes()` of TensorFlow's
//!   value (`tests/fixtures/expected`), `.shape` and `.dtype` texts, `.npy` an NPY 1.0 header then
//!   the `.bin` bytes; a description this test does not know how to check fails the test, so a
//!   change of the contract needs a change here;
//! * the escaping examples (`%` → `%25`, ..., `odd/name.bin/leaf`, the 200-byte limit and hash)
//!   hold for a checkpoint written with `tfmount::testkit::writer`.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::walk::{self, show, Core, Walk};
use common::*;
use serde_json::Value;
use tfmount::fs::{Fs, Kind};
use tfmount::parse::dtype::DType;
use tfmount::probe::probe;
use tfmount::render::elem::{self, Kind as Elem, Value as Num};
use tfmount::render::stats as stats_text;
use tfmount::render::values::Columns;
use tfmount::testkit::writer::CheckpointWriter;

// ---------------------------------------------------------------------------------------------
// Reading docs/layout.md
// ---------------------------------------------------------------------------------------------

/// The page that holds the layout contract.
const PAGE: &str = "docs/layout.md";

fn page() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The text under `heading` (a whole line), up to the next heading of the same or a higher level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let level = heading.bytes().take_while(|&b| b == b'#').count();
    let start = text
        .lines()
        .position(|l| l.trim_end() == heading)
        .unwrap_or_else(|| panic!("{PAGE} has no {heading:?} heading"));
    let lines: Vec<&str> = text.lines().collect();
    let mut in_code = false;
    let mut end = lines.len();
    for (i, l) in lines.iter().enumerate().skip(start + 1) {
        if l.starts_with("```") {
            in_code = !in_code;
        }
        let hashes = l.bytes().take_while(|&b| b == b'#').count();
        if !in_code && hashes > 0 && hashes <= level && l[hashes..].starts_with(' ') {
            end = i;
            break;
        }
    }
    let from = lines[..=start].iter().map(|l| l.len() + 1).sum::<usize>();
    let to = lines[..end].iter().map(|l| l.len() + 1).sum::<usize>();
    &text[from.min(text.len())..to.min(text.len())]
}

/// The lines of the first fenced code block in `text`.
fn first_code_block(text: &str) -> Vec<&str> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with("```"));
    lines.next().expect("a code block");
    lines.take_while(|l| !l.starts_with("```")).collect()
}

/// `text` with every run of whitespace (line breaks and indentation included) as one space.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every `` `token` `` of `text`, in order.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// Every `"token"` of `text`, in order.
fn quoted(text: &str) -> Vec<&str> {
    text.split('"').skip(1).step_by(2).collect()
}

/// One line of the contract block: `MOUNT/<path with <key>>  <description>`.
#[derive(Debug)]
struct Line {
    /// The path relative to the mount, split around `<key>` (`None` for a path without it).
    before: String,
    after: Option<String>,
    desc: String,
}

fn contract_lines(page: &str) -> Vec<Line> {
    let block = first_code_block(section(page, "## The layout contract"));
    assert!(!block.is_empty(), "the layout contract block is empty");
    block
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (path, desc) = l
                .split_once("  ")
                .unwrap_or_else(|| panic!("contract line without a description: {l:?}"));
            let path = path
                .strip_prefix("MOUNT/")
                .unwrap_or_else(|| panic!("contract line not under MOUNT/: {l:?}"));
            let (before, after) = match path.split_once("<key>") {
                Some((b, a)) => (b.to_string(), Some(a.to_string())),
                None => (path.to_string(), None),
            };
            assert!(
                !before.contains('<') && !after.as_deref().unwrap_or("").contains('<'),
                "contract line with a placeholder this test does not know: {l:?}"
            );
            Line {
                before,
                after,
                desc: desc.trim().to_string(),
            }
        })
        .collect()
}

/// Expands the page's dtype shorthand: `float16/32/64`, `int8..64`, `bool`.
fn expand_dtypes(list: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for item in list
        .split([',', ' '])
        .filter(|s| !s.is_empty() && *s != "and")
    {
        let stem: String = item
            .chars()
            .take_while(|c| c.is_ascii_alphabetic())
            .collect();
        let rest = &item[stem.len()..];
        if rest.is_empty() {
            out.insert(stem);
        } else if let Some((lo, hi)) = rest.split_once("..") {
            let (lo, hi): (u32, u32) = (lo.parse().expect("bits"), hi.parse().expect("bits"));
            let mut b = lo;
            while b <= hi {
                out.insert(format!("{stem}{b}"));
                b *= 2;
            }
        } else {
            for bits in rest.split('/') {
                out.insert(format!("{stem}{bits}"));
            }
        }
    }
    out
}

/// The dtypes the "Dtypes" bullet says get an `.npy` ("`.npy` exists for X, Y and Z only").
fn npy_dtypes(page: &str) -> BTreeSet<String> {
    let text = flat(section(page, "## The layout contract"));
    let start = text
        .find("`.npy` exists for ")
        .expect("the Dtypes bullet says which dtypes get an .npy")
        + "`.npy` exists for ".len();
    let end = start + text[start..].find(" only").expect("... only");
    expand_dtypes(&text[start..end])
}

// ---------------------------------------------------------------------------------------------
// The fixtures as TensorFlow recorded them
// ---------------------------------------------------------------------------------------------

/// One tensor of a fixture as TensorFlow's record gives it.
struct Rec {
    key: Vec<u8>,
    stem: Vec<u8>,
    dtype: String,
    shape: Vec<u64>,
    /// sha256 of numpy's `tobytes()` of TF's value (`None` for strings and variants).
    numpy_sha: Option<String>,
    /// sha256 of the bytes the layout gives them (strings: 8-byte lengths and bytes).
    layout_sha: String,
}

fn records(expected: &Value) -> Vec<Rec> {
    let mut out = Vec::new();
    for rec in expected["tensors"].as_array().expect("tensors") {
        out.push(Rec {
            key: common::rec_key(rec),
            stem: stem_path(rec),
            dtype: rec["dtype"].as_str().expect("dtype").to_string(),
            shape: common::dims(&rec["shape"]),
            numpy_sha: rec["sha256_tf_numpy"].as_str().map(str::to_string),
            layout_sha: rec["sha256"].as_str().expect("sha256").to_string(),
        });
    }
    // Tensors TensorFlow cannot return (variant) are served as stored.
    for rec in expected["unreadable_entries"]
        .as_array()
        .into_iter()
        .flatten()
    {
        out.push(Rec {
            key: common::rec_key(rec),
            stem: stem_path(rec),
            dtype: rec["dtype"].as_str().expect("dtype").to_string(),
            shape: common::dims(&rec["shape"]),
            numpy_sha: None,
            layout_sha: rec["stored"]["sha256"].as_str().expect("sha").to_string(),
        });
    }
    out
}

const FIXTURES: [(&str, &str); 2] = [
    ("all_dtypes/ckpt", "expected/all_dtypes.json"),
    ("partitioned/model.ckpt", "expected/partitioned.json"),
];

// ---------------------------------------------------------------------------------------------
// The contract block
// ---------------------------------------------------------------------------------------------

/// Phrases a line's description must keep for this test's check of it to be the check of what
/// it says (by the line's file suffix). A line whose description loses one, or a suffix not
/// listed here, fails the test: the page changed, and so must this test.
const CHECKED: &[(&str, &[&str])] = &[
    (
        ".bin",
        &["row-major", "little-endian", "exactly numpy's tobytes()"],
    ),
    (
        ".shape",
        &[
            "dims separated by one space, then \"\\n\"",
            "(scalar: just \"\\n\")",
        ],
    ),
    (".dtype", &["TensorFlow's dtype name", "+ \"\\n\""]),
    (
        ".npy",
        &[
            "NPY 1.0",
            "a header, then the same bytes as .bin",
            "only for dtypes numpy has natively",
        ],
    ),
];

fn check_text(got: &[u8], want: &str, what: &str, errs: &mut Vec<String>) {
    if got != want.as_bytes() {
        errs.push(format!("{what}: {:?}, want {want:?}", show(got)));
    }
}

#[test]
fn the_layout_contract_block_holds() {
    let text = page();
    let lines = contract_lines(&text);
    let npy_set = npy_dtypes(&text);
    let numpy_native: BTreeSet<String> = npy::DESCR.iter().map(|(n, _)| n.to_string()).collect();
    assert!(
        npy_set.is_subset(&numpy_native) && npy_set.len() >= 10,
        "{PAGE}'s .npy dtypes {npy_set:?} are not all numpy-native ({numpy_native:?})"
    );
    // The Strings bullet: checked by the `.bin` check below (TensorFlow's record of a string
    // tensor is the sha256 of exactly this layout) and by `string` missing from the .npy list.
    let contract = flat(section(&text, "## The layout contract"));
    let strings = contract
        .split("- **")
        .find(|b| b.starts_with("Strings.**"))
        .expect("the Strings bullet");
    for p in [
        "each element as an 8-byte little-endian length followed by its bytes",
        "in row-major order",
        "No `.npy`",
    ] {
        assert!(
            strings.contains(p),
            "the Strings bullet no longer says {p:?}: update tests/core/layout.rs"
        );
    }
    assert!(!npy_set.contains("string"));
    for l in &lines {
        let Some(after) = &l.after else { continue };
        if l.before != "variables/" {
            panic!("contract line outside variables/ with a key: {l:?}");
        }
        match CHECKED.iter().find(|(s, _)| s == after) {
            Some((_, phrases)) => {
                for p in *phrases {
                    assert!(
                        l.desc.contains(p),
                        "{PAGE}'s {after} line no longer says {p:?} (it says {:?}): update \
                         tests/core/layout.rs to check what it says now",
                        l.desc
                    );
                }
            }
            None => panic!(
                "{PAGE}'s layout contract names MOUNT/variables/<key>{after}, which \
                 tests/core/layout.rs does not check: add a check"
            ),
        }
    }
    let suffixes: Vec<&str> = lines.iter().filter_map(|l| l.after.as_deref()).collect();
    // The .dtype line's quoted examples must be dtype names the fixtures' files show.
    let dtype_line = lines.iter().find(|l| l.after.as_deref() == Some(".dtype"));
    let dtype_examples: Vec<String> = dtype_line
        .map(|l| quoted(&l.desc))
        .unwrap_or_default()
        .into_iter()
        .filter(|q| !q.starts_with('\\') && !q.contains(' '))
        .map(str::to_string)
        .collect();
    let mut dtypes_seen = BTreeSet::new();

    let mut errs = Vec::new();
    let mut checked = 0;
    for (src, json) in FIXTURES {
        let fs = Fs::new(
            &probe(&fixtures().join(src)).expect("probe"),
            &common::views_listed(),
        )
        .expect("Fs::new");
        let walked = walk::walk(
            &Core::strict(&fs),
            &Walk {
                read: true,
                keys: true,
                ..Walk::default()
            },
        );
        // Lines without `<key>`: the path exists.
        for l in lines.iter().filter(|l| l.after.is_none()) {
            if !walked.contains_key(l.before.trim_end_matches('/').as_bytes()) {
                errs.push(format!("{src}: MOUNT/{} is not there", l.before));
            }
        }
        // The files each key has, by its user.tfmount.key.
        let mut by_key: BTreeMap<&[u8], BTreeSet<Vec<u8>>> = BTreeMap::new();
        for (p, n) in &walked {
            if n.kind == Kind::File && p.starts_with(b"variables/") {
                if let Some(k) = &n.key {
                    by_key.entry(k).or_default().insert(p.clone());
                }
            }
        }
        for rec in records(&load_json(json)) {
            let what = format!("{src}: {}", show(&rec.key));
            let path = |suffix: &str| [&b"variables/"[..], &rec.stem, suffix.as_bytes()].concat();
            let has_npy = npy_set.contains(&rec.dtype);
            let want: BTreeSet<Vec<u8>> = suffixes
                .iter()
                .filter(|s| **s != ".npy" || has_npy)
                .map(|s| path(s))
                .collect();
            let got = by_key.remove(&rec.key[..]).unwrap_or_default();
            if got != want {
                errs.push(format!(
                    "{what}: files {:?}, the contract says {:?}",
                    got.iter().map(|p| show(p)).collect::<Vec<_>>(),
                    want.iter().map(|p| show(p)).collect::<Vec<_>>()
                ));
                continue;
            }
            let read = |suffix: &str| match &walked[&path(suffix)].data {
                Some(Ok(b)) => b.clone(),
                other => panic!("{what}{suffix}: {other:?}"),
            };
            dtypes_seen.insert(rec.dtype.clone());
            for suffix in &suffixes {
                if *suffix == ".npy" && !has_npy {
                    continue;
                }
                let bytes = read(suffix);
                match *suffix {
                    ".bin" => {
                        // numpy's tobytes() of TF's value; strings and variants as laid out.
                        let want = rec.numpy_sha.as_ref().unwrap_or(&rec.layout_sha);
                        if &sha256_hex(&bytes) != want {
                            errs.push(format!("{what}.bin: not numpy's tobytes()"));
                        }
                    }
                    ".shape" => {
                        let dims: Vec<String> = rec.shape.iter().map(|d| d.to_string()).collect();
                        let want = format!("{}\n", dims.join(" "));
                        check_text(&bytes, &want, &format!("{what}.shape"), &mut errs);
                    }
                    ".dtype" => {
                        let want = format!("{}\n", rec.dtype);
                        check_text(&bytes, &want, &format!("{what}.dtype"), &mut errs);
                    }
                    ".npy" => match npy::parse(&bytes) {
                        Ok(h) => {
                            let descr = npy::descr_of(&rec.dtype).expect("numpy-native");
                            if (h.descr.as_str(), h.fortran_order, &h.shape)
                                != (descr, false, &rec.shape)
                            {
                                errs.push(format!("{what}.npy: header {h:?}"));
                            }
                            if bytes[h.data_offset..] != read(".bin")[..] {
                                errs.push(format!("{what}.npy: data differs from .bin"));
                            }
                        }
                        Err(e) => errs.push(format!("{what}.npy: {e}")),
                    },
                    _ => unreachable!("every suffix has a check (see CHECKED)"),
                }
            }
            checked += 1;
        }
        if !by_key.is_empty() {
            errs.push(format!(
                "{src}: files of keys TensorFlow never wrote: {:?}",
                by_key.keys().map(|k| show(k)).collect::<Vec<_>>()
            ));
        }
    }
    assert!(
        errs.is_empty(),
        "{} errors:\n{}",
        errs.len(),
        errs.join("\n")
    );
    assert!(checked > 80, "only {checked} tensors checked");
    for name in &dtype_examples {
        assert!(
            dtypes_seen.contains(name),
            "{PAGE}'s .dtype example {name:?} is not a dtype name any fixture's .dtype reads"
        );
    }
    assert!(dtype_examples.len() >= 3, "{dtype_examples:?}");
    // Every dtype the page's .npy list names occurs in the fixtures (so each was checked).
    for d in &npy_set {
        assert!(dtypes_seen.contains(d), "no fixture tensor of dtype {d}");
    }
}

// ---------------------------------------------------------------------------------------------
// Name escaping
// ---------------------------------------------------------------------------------------------

/// The numbered rules of "### Name escaping", each as one line of text, and the text after them.
fn escaping_rules(page: &str) -> (Vec<String>, String) {
    let sec = section(page, "### Name escaping");
    let mut rules: Vec<String> = Vec::new();
    let mut rest = String::new();
    for l in sec.lines() {
        let t = l.trim();
        let numbered = t
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if numbered {
            rules.push(t.split_once(". ").map(|(_, r)| r).unwrap_or(t).to_string());
        } else if !t.is_empty() && l.starts_with("   ") && !rules.is_empty() && rest.is_empty() {
            let last = rules.last_mut().expect("a rule");
            last.push(' ');
            last.push_str(t);
        } else if !rules.is_empty() {
            rest.push_str(t);
            rest.push(' ');
        }
    }
    assert!(rules.len() >= 4, "found {} escaping rules", rules.len());
    (rules, rest)
}

/// The "X is written `Y`" / "`X` is `Y`" examples of the rules, as (raw component, escaped).
fn escaping_examples(rules: &[String]) -> Vec<(Vec<u8>, String)> {
    let mut out = Vec::new();
    for rule in rules {
        for clause in rule.split([';', ',', '(']) {
            let Some((subject, object)) = clause
                .split_once(" is written ")
                .or_else(|| clause.split_once(" is "))
            else {
                continue;
            };
            let Some(esc) = backticked(object).first().map(|s| s.to_string()) else {
                continue;
            };
            let subject = subject.trim();
            let raw = match subject {
                "NUL" => vec![0],
                "an empty component" => Vec::new(),
                s if s.starts_with('`') && s.ends_with('`') && s.len() >= 2 => {
                    s.as_bytes()[1..s.len() - 1].to_vec()
                }
                _ => continue,
            };
            out.push((raw, esc));
        }
    }
    out
}

#[test]
fn the_name_escaping_rules_hold() {
    let text = page();
    let (rules, rest) = escaping_rules(&text);
    let examples = escaping_examples(&rules);
    for (raw, esc) in [
        (&b"%"[..], "%25"),
        (b"\0", "%00"),
        (b"", "%"),
        (b".", "%2E"),
        (b"..", "%2E%2E"),
    ] {
        assert!(
            examples.iter().any(|(r, e)| r == raw && e == esc),
            "the escaping rules no longer give {} -> {esc} (parsed: {examples:?})",
            show(raw)
        );
    }
    // Rule 3: the suffixes a directory component may not end in, and its example.
    let rule3 = rules
        .iter()
        .find(|r| r.contains("has its last `.` written `%2E`"))
        .expect("the directory-suffix rule");
    let (ending, _) = rule3
        .split_once(" has its last ")
        .expect("... has its last ...");
    let dir_suffixes: Vec<&str> = backticked(ending.split_once("ending in").expect("ending in").1);
    assert!(dir_suffixes.len() >= 4 && dir_suffixes.iter().all(|s| s.starts_with('.')));
    let example = backticked(rule3)
        .into_iter()
        .find(|t| t.matches('/').count() == 2)
        .expect("rule 3's example key");
    // Rule 4: the length kept, and the hash.
    let rule4 = rules
        .iter()
        .find(|r| r.contains("FNV-1a-64"))
        .expect("the long-name rule");
    let keep: usize = rule4
        .split_once("longer than ")
        .and_then(|(_, r)| r.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .expect("longer than N bytes");
    assert!(
        rule4.contains(&format!("keeps its first {keep} bytes"))
            && rule4.contains("`%#` and the 16 lowercase hex digits of the FNV-1a-64 hash of")
            && rule4.contains("raw component"),
        "rule 4 changed: update tests/core/layout.rs ({rule4:?})"
    );
    // "other spellings (`%61`, lowercase hex) do not resolve".
    let other = backticked(
        rest.split_once("other spellings")
            .expect("other spellings")
            .1,
    )
    .first()
    .map(|s| s.to_string())
    .expect("an example of another spelling");
    let other_byte = u8::from_str_radix(&other[1..], 16).expect("a %XX example");

    // A checkpoint holding every example, as a directory component and as a tensor name.
    let mut keys: BTreeSet<Vec<u8>> = BTreeSet::new();
    for (raw, _) in &examples {
        keys.insert([&b"e/"[..], raw, b"/t"].concat());
        keys.insert([&b"f/"[..], raw].concat());
    }
    for s in &dir_suffixes {
        keys.insert(format!("g/x{s}/leaf").into_bytes());
        keys.insert(format!("g/x{s}").into_bytes());
    }
    let (ex_dir, ex_leaf) = example.rsplit_once('/').expect("a/b/c");
    let ex_tensor = ex_dir.rsplit_once('.').expect("a suffix").0;
    keys.insert(example.as_bytes().to_vec());
    keys.insert(ex_tensor.as_bytes().to_vec());
    let short = vec![b'q'; keep];
    let long = vec![b'q'; keep + 1];
    keys.insert([&b"h/"[..], &short].concat());
    keys.insert([&b"h/"[..], &long].concat());
    keys.insert(vec![b'o', b'/', other_byte]);
    let tmp = tempfile::tempdir().expect("tmp");
    let prefix = tmp.path().join("names");
    let mut w = CheckpointWriter::new(&prefix, 1).expect("writer");
    for (i, k) in keys.iter().enumerate() {
        w.add(k, DType(1), &[1], &f32_bytes(&[i as f32]), 0)
            .expect("add");
    }
    w.finish().expect("finish");
    let fs = Fs::new(&probe(&prefix).expect("probe"), &common::views_listed()).expect("Fs::new");
    let names = |dir: &str| -> BTreeSet<Vec<u8>> {
        let a = lookup_path(&fs, dir.as_bytes())
            .ok()
            .unwrap_or_else(|| panic!("{dir}"));
        let mut v = BTreeSet::new();
        fs.readdir(a.ino, 0, |e| {
            v.insert(e.name);
            false
        })
        .expect("readdir");
        v.remove(&b"."[..]);
        v.remove(&b".."[..]);
        v
    };
    // Rules 1 and 2: the same spelling as a directory and as a tensor's stem.
    let want_dirs: BTreeSet<Vec<u8>> = examples
        .iter()
        .map(|(_, e)| e.as_bytes().to_vec())
        .collect();
    assert_eq!(names("variables/e"), want_dirs, "escaped directory names");
    for (raw, esc) in &examples {
        let p = format!("variables/f/{esc}.bin");
        let a = lookup_path(&fs, p.as_bytes())
            .ok()
            .unwrap_or_else(|| panic!("{p} missing"));
        let key = fs.getxattr(a.ino, b"user.tfmount.key").expect("key");
        assert_eq!(key, [&b"f/"[..], raw].concat(), "{p}");
    }
    // Rule 3.
    for s in &dir_suffixes {
        let (stem, ext) = s.rsplit_once('.').expect("a dot");
        let dir = format!("variables/g/x{stem}%2E{ext}");
        assert!(
            lookup_path(&fs, format!("{dir}/leaf.bin").as_bytes()).is_ok(),
            "{dir}"
        );
        assert!(lookup_path(&fs, format!("variables/g/x{s}.bin").as_bytes()).is_ok());
        assert!(lookup_path(&fs, format!("variables/g/x{s}/leaf.bin").as_bytes()).is_err());
    }
    let (d_stem, d_ext) = ex_dir.rsplit_once('.').expect("dot");
    let p = format!("variables/{d_stem}%2E{d_ext}/{ex_leaf}.bin");
    assert!(lookup_path(&fs, p.as_bytes()).is_ok(), "{p}");
    let p = format!("variables/{ex_tensor}.bin");
    let a = lookup_path(&fs, p.as_bytes()).expect("the example's tensor");
    assert_eq!(
        fs.getxattr(a.ino, b"user.tfmount.key").expect("key"),
        ex_tensor.as_bytes()
    );
    // Rule 4.
    let h = names("variables/h");
    let short_name = [&short[..], b".bin"].concat();
    assert!(
        h.contains(&short_name),
        "a {keep}-byte component is kept whole"
    );
    let mut hashed = long[..keep].to_vec();
    hashed.extend_from_slice(format!("%#{:016x}", fnv1a_64(&long)).as_bytes());
    hashed.extend_from_slice(b".bin");
    assert!(
        h.contains(&hashed),
        "{:?}",
        h.iter().map(|n| show(n)).collect::<Vec<_>>()
    );
    let a = lookup_path(&fs, &[&b"variables/h/"[..], &hashed].concat()).expect("hashed");
    assert_eq!(
        fs.getxattr(a.ino, b"user.tfmount.key").expect("key"),
        [&b"h/"[..], &long].concat()
    );
    // One spelling: `%61` for the byte it escapes, and lowercase hex, do not resolve.
    let plain = [&b"variables/o/"[..], &[other_byte], b".bin"].concat();
    assert!(lookup_path(&fs, &plain).is_ok());
    assert!(lookup_path(&fs, format!("variables/o/{other}.bin").as_bytes()).is_err());
    assert!(lookup_path(&fs, b"variables/f/%2e.bin").is_err());
    assert!(lookup_path(&fs, b"variables/f/%2E.bin").is_ok());
}

// ---------------------------------------------------------------------------------------------
// text/ and stats/: formats and sizes
// ---------------------------------------------------------------------------------------------

/// The dtype TensorFlow names `name`.
fn dtype_named(name: &str) -> DType {
    (0..64)
        .map(DType)
        .find(|d| d.display_name() == name)
        .unwrap_or_else(|| panic!("{PAGE}: no dtype {name}"))
}

/// The text bullet's width table: `(dtypes, width, widest text)` per row.
fn width_table(page: &str) -> Vec<(Vec<DType>, usize, String)> {
    let views = section(page, "### Views: text, statistics, safetensors, tables");
    let rows: Vec<Vec<&str>> = views
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect();
    assert!(
        rows.len() >= 10,
        "{PAGE}: the text/ width table has {} rows",
        rows.len()
    );
    rows.iter()
        .map(|r| {
            assert_eq!(r.len(), 3, "{PAGE}: width table row {r:?}");
            let dtypes = backticked(r[0]).into_iter().map(dtype_named).collect();
            let width = r[1].parse().expect("a width");
            let widest = backticked(r[2]);
            assert_eq!(widest.len(), 1, "{PAGE}: one widest text per row: {r:?}");
            (dtypes, width, widest[0].to_string())
        })
        .collect()
}

/// The text of `v` as `text/` writes it (unpadded).
fn value_text(v: Num) -> String {
    let mut o = Vec::new();
    elem::write_value(&mut o, v);
    String::from_utf8(o).expect("ascii")
}

/// `s` read as a value of `kind` (the table's widest texts of the wide dtypes).
fn parse_value(kind: Elem, s: &str) -> Num {
    let float = |t: &str| t.parse::<f64>().expect("a float");
    // `re±imj`: the sign that starts the imaginary part is the last one not after an `e`.
    let complex = |t: &str| {
        let body = t.strip_suffix('j').expect("complex ends in j");
        let at = (1..body.len())
            .rev()
            .find(|&i| matches!(&body[i..=i], "+" | "-") && &body[i - 1..i] != "e")
            .expect("a sign");
        (float(&body[..at]), float(&body[at..]))
    };
    match kind {
        Elem::F64 => Num::F64(float(s)),
        Elem::F32 | Elem::BF16 | Elem::Mini { .. } => Num::F32(float(s) as f32),
        Elem::Complex64 => {
            let (re, im) = complex(s);
            Num::C64(re as f32, im as f32)
        }
        Elem::Complex128 => {
            let (re, im) = complex(s);
            Num::C128(re, im)
        }
        Elem::Bool => Num::Bool(s == "true"),
        _ => Num::Int(s.parse().expect("an integer")),
    }
}

/// The width table holds: each dtype's width is what `text/` pads to; the widest text of a row
/// is a value's text of that width (for the 1- and 2-byte dtypes: the longest text of all their
/// encodings is the width, and the row's widest text is one of them); every dtype with a text
/// form is in the table.
#[test]
fn the_text_width_table_holds() {
    let text = page();
    let table = width_table(&text);
    let mut listed = BTreeSet::new();
    for (dtypes, width, widest) in &table {
        assert_eq!(
            widest.len(),
            *width,
            "{PAGE}: {widest:?} is not {width} wide"
        );
        let mut seen = false;
        for &d in dtypes {
            assert!(listed.insert(d.0), "{PAGE}: {} twice", d.display_name());
            let cols = Columns::new(d, &[1]).expect("text form").expect("numeric");
            assert_eq!(cols.width(), *width, "{}", d.display_name());
            let kind = Elem::of(d).expect("kind");
            let es = cols.elem_size() as usize;
            if es <= 2 {
                let texts: BTreeSet<String> = (0..1u32 << (8 * es))
                    .map(|e| value_text(kind.decode(&e.to_le_bytes()[..es])))
                    .collect();
                let most = texts.iter().map(String::len).max();
                assert_eq!(most, Some(*width), "{}: every encoding", d.display_name());
                seen |= texts.contains(widest);
            } else {
                assert_eq!(
                    &value_text(parse_value(kind, widest)),
                    widest,
                    "{}",
                    d.display_name()
                );
                seen = true;
            }
        }
        assert!(seen, "{PAGE}: {widest:?} is no value of {dtypes:?}");
    }
    let with_text: BTreeSet<i32> = (0..64)
        .filter(|&d| matches!(Columns::new(DType(d), &[1]), Ok(Some(_))))
        .collect();
    assert_eq!(listed, with_text, "{PAGE}: the table's dtypes");
}

/// For every fixture tensor, from a fresh mount: the size the first `stat` of its `text/` and
/// `stats/` files gives is what a read to the end returns; a numeric text is
/// `elements × (width + 1)` bytes with the table's width, and its lines are the rows of the
/// last axis, every element in its cell; the statistics are `475 + 17 × E + 16 × C` bytes. Every
/// directory of `text/` and `stats/` leads to a file.
#[test]
fn text_and_stats_sizes_are_the_documented_ones() {
    let text = page();
    let views = flat(section(
        &text,
        "### Views: text, statistics, safetensors, tables",
    ));
    for claim in [
        "the file is `elements × (width + 1)` bytes and element `k` (row-major) starts at byte `k × (width + 1)`",
        "E is 24 for float64, integer and bool tensors, 15 for the others; C is the number of digits of the element count. The file is always `475 + 17 × E + 16 × C` bytes",
        "`stats/` has no directory holding only string or complex tensors",
    ] {
        assert!(views.contains(claim), "{PAGE} no longer says {claim:?}: update tests/core/layout.rs");
    }
    let contract = flat(section(&text, "## The layout contract"));
    assert!(contract.contains(
        "the size `stat` reports is the number of bytes a read to the end returns, for every file"
    ));
    let widths: BTreeMap<i32, usize> = width_table(&text)
        .into_iter()
        .flat_map(|(ds, w, _)| ds.into_iter().map(move |d| (d.0, w)))
        .collect();
    let mut checked = (0, 0);
    for (src, json) in FIXTURES {
        let probed = probe(&fixtures().join(src)).expect("probe");
        let fs = Fs::new(&probed, &common::views_listed()).expect("Fs::new");
        for rec in records(&load_json(json)) {
            let d = dtype_named(&rec.dtype);
            let n: u64 = rec.shape.iter().product();
            let what = format!("{src}: {}", show(&rec.key));
            let path = |view: &str| [view.as_bytes(), b"/", &rec.stem, b".txt"].concat();
            // A fresh core for each first stat: nothing rendered or read before.
            let fresh = Fs::new(&probed, &common::views_listed()).expect("Fs::new");
            if let Some(&w) = widths.get(&d.0) {
                let a = lookup_path(&fresh, &path("text")).expect("text file");
                assert_eq!(a.size, n * (w as u64 + 1), "{what}: text size");
                let t = read_path(&fs, &path("text")).expect("text file");
                assert_eq!(t.len() as u64, a.size, "{what}: text read");
                let row = rec.shape.last().copied().unwrap_or(1) as usize;
                let cell = w + 1;
                for line in t.split_inclusive(|&b| b == b'\n') {
                    assert_eq!(line.len(), row * cell, "{what}: a row");
                    for c in line.chunks(cell) {
                        let tok = std::str::from_utf8(&c[..w]).expect("utf-8");
                        assert!(!tok.trim().is_empty() && tok.trim() == tok.trim_start());
                        assert!(!tok.trim().contains(' ') && tok.ends_with(tok.trim()));
                    }
                }
                checked.0 += 1;
            }
            if let Ok(a) = lookup_path(&fresh, &path("stats")) {
                let e = match Elem::of(d) {
                    Some(Elem::F64 | Elem::Int { .. } | Elem::SubByte { .. } | Elem::Bool) => 24,
                    _ => 15,
                };
                let c = n.checked_ilog10().map_or(1, |l| l as u64 + 1);
                assert_eq!(a.size, 475 + 17 * e + 16 * c, "{what}: stats size");
                assert_eq!(stats_text::text_len(d, n).ok(), Some(a.size));
                assert_eq!(
                    read_path(&fs, &path("stats")).expect("stats file").len() as u64,
                    a.size,
                    "{what}: stats read"
                );
                checked.1 += 1;
            }
        }
        // Every directory of the views leads to a file.
        let walked = walk::walk(&Core::strict(&fs), &Walk::default());
        for (p, node) in &walked {
            if node.kind == Kind::Dir && (p.starts_with(b"text/") || p.starts_with(b"stats/")) {
                let mut under = p.clone();
                under.push(b'/');
                assert!(
                    walked
                        .iter()
                        .any(|(q, n)| n.kind == Kind::File && q.starts_with(&under)),
                    "{src}: {} leads to no file",
                    show(p)
                );
            }
        }
    }
    assert!(checked.0 > 60 && checked.1 > 50, "{checked:?}");
}

/// The text and stats examples of the page are what `text/` and `stats/` show for TensorFlow's
/// `dense/kernel` of the tf1_adam fixture (lines compared without trailing spaces, which
/// editors drop: the histogram line is padded).
#[test]
fn the_text_and_stats_examples_are_real() {
    let text = page();
    let views = section(&text, "### Views: text, statistics, safetensors, tables");
    let probed = probe(&fixtures().join("tf1_adam/model.ckpt-3")).expect("probe");
    let fs = Fs::new(&probed, &common::views_listed()).expect("Fs::new");
    let mut found = 0;
    let lines: Vec<&str> = views.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let Some(file) = l.trim().strip_prefix("$ cat MOUNT/") else {
            continue;
        };
        if !file.starts_with("text/") && !file.starts_with("stats/") {
            continue;
        }
        let indent = l.len() - l.trim_start().len();
        let shown: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| !l.trim_start().starts_with("```"))
            .map(|l| l.get(indent..).unwrap_or("").trim_end())
            .collect();
        let got = read_path(&fs, file.as_bytes()).unwrap_or_else(|| panic!("{file}"));
        let got = String::from_utf8(got).expect("utf-8");
        let got: Vec<&str> = got.lines().map(str::trim_end).collect();
        assert_eq!(shown, got, "{PAGE}: the example of {file}");
        found += 1;
    }
    assert_eq!(found, 2, "{PAGE}: the text/ and stats/ examples");
}
