//! Graph mounts (meta graphs, functions, signatures, constants, names/): the filesystem core
//! against TensorFlow's record of each graph fixture, hostile graph files, and real mounts.

use crate::common;

use std::collections::HashSet;
use std::path::Path;

use common::{lookup_path, open_fs, path_exists, read_all};
use tfmount::fs::{DirEntry, Fs, Kind, ROOT};

fn list(fs: &Fs, ino: u64) -> Result<Vec<DirEntry>, tfmount::error::FsError> {
    let mut v = Vec::new();
    fs.readdir(ino, 0, |e| {
        v.push(e);
        false
    })?;
    Ok(v)
}

/// Walks everything reachable from the root through every operation, ignoring errors (hostile
/// inputs may fail any of them) but never following more than `budget` nodes. Returns the
/// number of files read without error.
fn exercise(fs: &Fs, budget: usize) -> usize {
    let mut stack = vec![ROOT];
    let mut seen = HashSet::new();
    let mut ok_reads = 0;
    while let Some(ino) = stack.pop() {
        if !seen.insert(ino) || seen.len() > budget {
            continue;
        }
        let attr = fs.getattr(ino);
        let _ = fs.getxattr(ino, tfmount::fs::KEY_XATTR.as_bytes());
        let _ = fs.lookup(ino, b"..");
        let _ = fs.lookup(ino, b"missing.pbtxt");
        match attr {
            Ok(a) if a.kind == Kind::Dir => {
                if let Ok(entries) = list(fs, ino) {
                    if let Some(mid) = entries.get(entries.len() / 2) {
                        let _ = fs.readdir(ino, mid.cookie, |_| false);
                    }
                    for e in entries {
                        if e.name != b"." && e.name != b".." {
                            let _ = fs.lookup(ino, &e.name);
                            stack.push(e.ino);
                        }
                    }
                }
            }
            Ok(a) if a.kind == Kind::File => {
                if let Ok(b) = read_all(fs, ino, 4096, 1 << 20) {
                    assert!(b.len() as u64 <= a.size.max(1 << 20), "read past the size");
                    ok_reads += 1;
                }
                let _ = fs.read(ino, a.size.saturating_sub(3), 10);
                let _ = fs.read(ino, u64::MAX - 5, 10);
            }
            Ok(_) => {
                let _ = fs.readlink(ino);
            }
            Err(_) => {}
        }
    }
    ok_reads
}

#[test]
fn hostile_saved_model_pb_truncations_and_bit_flips() {
    let src = common::fixtures().join("demo_savedmodel");
    let pb = std::fs::read(src.join("saved_model.pb")).expect("saved_model.pb");
    let clean = open_fs(&src).expect("clean fixture mounts");
    let clean_reads = exercise(&clean, 100_000);
    assert!(
        clean_reads > 40,
        "the clean model serves its files ({clean_reads})"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let sm = dir.path().join("sm");
    std::fs::create_dir(&sm).expect("mkdir");
    let write = |bytes: &[u8]| std::fs::write(sm.join("saved_model.pb"), bytes).expect("write");
    let mut rng = common::Rng::new(42);
    let (mut mounted, mut refused) = (0, 0);
    let mut variants: Vec<Vec<u8>> = Vec::new();
    for k in 0..60 {
        variants.push(pb[..(k * pb.len() / 60)].to_vec());
    }
    for _ in 0..250 {
        let mut b = pb.clone();
        let i = rng.below(b.len() as u64) as usize;
        b[i] ^= 1 << rng.below(8);
        variants.push(b);
    }
    for _ in 0..40 {
        // Overwrite a run with 0xff: huge varints and lengths.
        let mut b = pb.clone();
        let i = rng.below(b.len() as u64) as usize;
        for x in b.iter_mut().skip(i).take(10) {
            *x = 0xff;
        }
        variants.push(b);
    }
    for v in &variants {
        write(v);
        match open_fs(&sm) {
            Ok(fs) => {
                mounted += 1;
                exercise(&fs, 20_000);
            }
            Err(_) => refused += 1,
        }
    }
    eprintln!(
        "{} hostile saved_model.pb variants: {mounted} mounted and walked, {refused} refused at mount",
        variants.len()
    );
    assert_eq!(mounted + refused, variants.len());
    assert!(mounted > 0 && refused > 0, "both outcomes are exercised");
}

#[test]
fn deeply_nested_and_oversized_graph_messages_fail_cleanly() {
    use prost::Message;
    use tfmount::proto::*;
    let dir = tempfile::tempdir().expect("tempdir");
    // An AttrValue list nested 10 000 deep: decoding must refuse it, not overflow the stack.
    let mut inner = Vec::new();
    let wrap = |tag: u8, body: &[u8]| {
        let mut v = vec![tag];
        prost::encoding::encode_varint(body.len() as u64, &mut v);
        v.extend_from_slice(body);
        v
    };
    for _ in 0..10_000 {
        // AttrValue.list (1) -> ListValue.func (9) -> NameAttrList.attr (2) -> entry.value (2)
        inner = wrap(0x0a, &wrap(0x4a, &wrap(0x12, &wrap(0x12, &inner))));
    }
    let node = NodeDef {
        name: "deep".into(),
        op: "Const".into(),
        ..Default::default()
    };
    let mut nb = node.encode_to_vec();
    nb.push(0x2a); // attr (5) entry
    let mut e = vec![0x0a, 1, b'x', 0x12];
    prost::encoding::encode_varint(inner.len() as u64, &mut e);
    e.extend_from_slice(&inner);
    prost::encoding::encode_varint(e.len() as u64, &mut nb);
    nb.extend_from_slice(&e);
    // A Const whose splat value claims 2^62 elements, and one with a negative dim.
    let splat = |name: &str, dims: Vec<i64>| {
        let t = TensorProto {
            dtype: 1,
            tensor_shape: Some(tfmount::testkit::writer::raw_shape_proto(&dims)),
            float_val: vec![1.0],
            ..Default::default()
        };
        let mut n = NodeDef {
            name: name.into(),
            op: "Const".into(),
            ..Default::default()
        };
        n.attr.insert(
            "value".into(),
            AttrValue {
                value: Some(attr_value::Value::Tensor(t)),
            },
        );
        n.encode_to_vec()
    };
    let mut graph = Vec::new();
    for n in [
        nb,
        splat("huge", vec![1 << 30, 1 << 30]),
        splat("neg", vec![-3]),
    ] {
        graph.push(0x0a);
        prost::encoding::encode_varint(n.len() as u64, &mut graph);
        graph.extend_from_slice(&n);
    }
    let path = dir.path().join("g.pb");
    std::fs::write(&path, &graph).expect("write");
    let fs = open_fs(&path).expect("a GraphDef with odd nodes still mounts");
    assert!(fs.lookup(ROOT, b"graph").is_ok(), "graph link");
    let graph_dir = {
        let mg = fs.lookup(ROOT, b"meta_graphs").unwrap();
        let gd = fs.lookup(mg.ino, b"graphdef").unwrap();
        fs.lookup(gd.ino, b"graph").unwrap()
    };
    let deep = fs.lookup(graph_dir.ino, b"deep.pbtxt").expect("listed");
    let err = fs.read(deep.ino, 0, 4096).expect_err("too deep to render");
    assert_eq!(err.errno(), libc::EIO);
    let consts = {
        let mg = fs.lookup(ROOT, b"meta_graphs").unwrap();
        let gd = fs.lookup(mg.ino, b"graphdef").unwrap();
        fs.lookup(gd.ino, b"constants").unwrap()
    };
    let huge = fs
        .lookup(consts.ino, b"huge.bin")
        .expect("huge splat is listed");
    assert_eq!(huge.size, 1 << 62, "size without allocation");
    let tail = fs.read(huge.ino, (1 << 62) - 4, 100).expect("tail read");
    assert_eq!(&tail[..], &1f32.to_le_bytes());
    let neg = fs.lookup(consts.ino, b"neg.bin").expect("listed");
    let err = fs.read(neg.ino, 0, 10).expect_err("bad dim");
    assert_eq!(err.errno(), libc::EIO);
    assert!(exercise(&fs, 1000) > 0);
}

// ---------------------------------------------------------------------------------------------
// Against TensorFlow's record of each graph fixture (tests/fixtures/graphs/expected/*.json)
// ---------------------------------------------------------------------------------------------

use prost::Message;
use serde_json::Value;
use tfmount::proto::{FunctionDef, GraphDef, MetaGraphDef, NodeDef, SavedModel};

fn graphs_dir() -> std::path::PathBuf {
    common::fixtures().join("graphs")
}

fn load(rel: &str) -> Value {
    let t =
        std::fs::read_to_string(graphs_dir().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn cat(b: &[&[u8]]) -> Vec<u8> {
    b.concat()
}

/// Reads the file at `path` (relative to the root; no symlinks followed).
fn read_sized(fs: &Fs, path: &[u8]) -> Vec<u8> {
    let mut ino = ROOT;
    for c in path.split(|&b| b == b'/') {
        ino = fs
            .lookup(ino, c)
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(path)))
            .ino;
    }
    let size = fs.getattr(ino).expect("getattr").size;
    let got = read_all(fs, ino, 64 << 10, usize::MAX).expect("read");
    assert_eq!(
        got.len() as u64,
        size,
        "{}: size",
        String::from_utf8_lossy(path)
    );
    got
}

/// Parses protobuf text with our own parser (prost-reflect) into message type `M`.
fn parse<M: Message + Default>(type_name: &str, text: &[u8]) -> M {
    let desc = tfmount::descriptors::descriptor(type_name).expect("descriptor");
    let s = std::str::from_utf8(text).expect("text is UTF-8");
    let m = prost_reflect::DynamicMessage::parse_text_format(desc, s)
        .unwrap_or_else(|e| panic!("{type_name} text does not parse: {e}\n{s}"));
    M::decode(m.encode_to_vec().as_slice()).expect("transcode")
}

/// Equal messages (NaN values compare by their encoding: maps are BTreeMaps, so the encoding
/// is deterministic).
fn same<M: Message + PartialEq + std::fmt::Debug>(a: &M, b: &M, what: &str) {
    if a != b {
        assert_eq!(
            a.encode_to_vec(),
            b.encode_to_vec(),
            "{what}: {a:?}\n!=\n{b:?}"
        );
    }
}

fn check_graph(fs: &Fs, base: &[u8], g: &GraphDef, what: &str) -> usize {
    let mut n = 0;
    for node in &g.node {
        let p = cat(&[
            base,
            b"/graph/",
            &common::name_path(node.name.as_bytes()),
            b".pbtxt",
        ]);
        let got: NodeDef = parse("tensorflow.NodeDef", &read_sized(fs, &p));
        same(&got, node, &format!("{what} node {}", node.name));
        n += 1;
    }
    for f in g.library.iter().flat_map(|l| l.function.iter()) {
        let name = f.signature.as_ref().map(|s| s.name.as_str()).unwrap_or("");
        let esc = tfmount::namespace::escape(name.as_bytes(), false);
        let p = cat(&[base, b"/functions/", &esc, b".pbtxt"]);
        let mut got: FunctionDef = parse("tensorflow.FunctionDef", &read_sized(fs, &p));
        assert!(
            got.node_def.is_empty(),
            "{what}: {name}.pbtxt holds no nodes"
        );
        let dir = tfmount::namespace::escape(name.as_bytes(), true);
        for node in &f.node_def {
            let p = cat(&[
                base,
                b"/functions/",
                &dir,
                b"/",
                &common::name_path(node.name.as_bytes()),
                b".pbtxt",
            ]);
            got.node_def
                .push(parse("tensorflow.NodeDef", &read_sized(fs, &p)));
            n += 1;
        }
        same(&got, f, &format!("{what} function {name}"));
    }
    n
}

fn check_constants(fs: &Fs, base: &[u8], consts: &Value, what: &str) -> usize {
    let Some(consts) = consts.as_object() else {
        return 0;
    };
    for (name, rec) in consts {
        let stem = cat(&[base, b"/constants/", &common::name_path(name.as_bytes())]);
        let p = |suffix: &str| cat(&[&stem, suffix.as_bytes()]);
        let bin = read_sized(fs, &p(".bin"));
        assert_eq!(
            common::sha256_hex(&bin),
            rec["sha256"].as_str().unwrap(),
            "{what}: {name}.bin"
        );
        let dims: Vec<String> = rec["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert_eq!(
            read_sized(fs, &p(".shape")),
            format!("{}\n", dims.join(" ")).into_bytes(),
            "{what}: {name}.shape"
        );
        let dtype = rec["dtype"].as_str().unwrap();
        assert_eq!(
            read_sized(fs, &p(".dtype")),
            format!("{dtype}\n").into_bytes(),
            "{what}: {name}.dtype"
        );
        let npy = rec["npy"].as_bool().unwrap();
        assert_eq!(
            path_exists(fs, &p(".npy")),
            npy,
            "{what}: {name}.npy exists iff numpy holds {dtype}"
        );
        if npy {
            let f = read_sized(fs, &p(".npy"));
            assert!(
                f.starts_with(b"\x93NUMPY") && f.ends_with(&bin),
                "{what}: {name}.npy"
            );
        }
    }
    consts.len()
}

/// `saved_model_cli show --all` split into each meta graph's section (from its `MetaGraphDef
/// with tag-set` line to its ops line), by tag set, and the `Concrete Functions:` part after the
/// last one (empty for TF1 models).
fn split_show_all(out: &str) -> (Vec<(String, String)>, String) {
    const HEAD: &str = "\nMetaGraphDef with tag-set: '";
    let (body, tail) = match out.find("\nConcrete Functions:") {
        Some(i) => out.split_at(i),
        None => (out, ""),
    };
    let starts: Vec<usize> = body.match_indices(HEAD).map(|(i, _)| i).collect();
    let mut sections = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(body.len());
        let sec = &body[s..end];
        let tags = sec[HEAD.len()..]
            .split_once("' contains the following SignatureDefs:")
            .expect("header")
            .0;
        sections.push((tags.to_string(), sec.to_string()));
    }
    (sections, tail.to_string())
}

/// The items of a printed Python set of strings (`{'a', "b'c"}` or `set()`), unescaped
/// enough to compare.
fn python_str_set(s: &str) -> Vec<String> {
    if s == "set()" {
        return Vec::new();
    }
    let inner = s
        .strip_prefix('{')
        .and_then(|x| x.strip_suffix('}'))
        .unwrap_or_else(|| panic!("not a set: {s}"));
    let mut items = Vec::new();
    let mut chars = inner.chars().peekable();
    while let Some(q) = chars.next() {
        assert!(q == '\'' || q == '"', "set item not quoted: {s}");
        let mut item = String::new();
        loop {
            match chars
                .next()
                .unwrap_or_else(|| panic!("unterminated item: {s}"))
            {
                '\\' => {
                    item.push('\\');
                    item.push(chars.next().expect("escape"));
                }
                c if c == q => break,
                c => item.push(c),
            }
        }
        items.push(item);
        match (chars.next(), chars.next()) {
            (None, _) => break,
            (Some(','), Some(' ')) => {}
            other => panic!("bad separator {other:?} in {s}"),
        }
    }
    items.sort();
    items
}

/// Splits `s` at the `, ` that are outside brackets and quotes.
fn split_top_level(s: &str) -> Vec<String> {
    let (mut depth, mut quote, mut cur) = (0i32, None, String::new());
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => depth -= 1,
            (None, ',') if depth == 0 && chars.peek() == Some(&' ') => {
                chars.next();
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `saved_model_cli show --all` output with what Python prints in an order that changes from
/// run to run (or that depends on a process-wide counter) put in a canonical order: the ops
/// set sorted, a dict's entries sorted, and the `Option #n` blocks of one function sorted with
/// their numbers dropped. Every other line is kept byte for byte.
fn canon_show_all(text: &str) -> String {
    const OPS: &str = " contains the following ops: ";
    const DICT_END: &str = ", \u{8}\u{8}}";
    let lines: Vec<String> = text
        .split('\n')
        .map(|line| match line.split_once(OPS) {
            Some((head, set)) if head.starts_with("The MetaGraph with tag set ") => {
                format!("{head}{OPS}{:?}", python_str_set(set))
            }
            _ => match line.split_once("Value: {") {
                Some((pad, rest)) if pad.trim().is_empty() && rest.ends_with(DICT_END) => {
                    let mut entries = split_top_level(&rest[..rest.len() - DICT_END.len()]);
                    entries.sort();
                    format!("{pad}Value: {{{}{DICT_END}", entries.join(", "))
                }
                _ => line.to_string(),
            },
        })
        .collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with("    Option #") {
            out.push(lines[i].clone());
            i += 1;
            continue;
        }
        let mut blocks = Vec::new();
        while lines.get(i).is_some_and(|l| l.starts_with("    Option #")) {
            let mut block = vec!["    Option #*".to_string()];
            i += 1;
            while lines.get(i).is_some_and(|l| l.starts_with("      ")) {
                block.push(lines[i].clone());
                i += 1;
            }
            blocks.push(block.join("\n"));
        }
        blocks.sort();
        out.extend(blocks);
    }
    out.join("\n")
}

/// Asserts that `got` is `want` (`saved_model_cli` output) up to the orders `canon_show_all`
/// normalizes.
fn assert_same_show_all(got: &str, want: &str, what: &str) {
    assert_eq!(canon_show_all(got), canon_show_all(want), "{what}");
}

/// What `signatures.txt` of the meta graph with tag set `tags` holds: its section of the
/// recorded `show --all`, then the `Concrete Functions:` part if it has an object graph.
fn expected_signatures_txt(show_all: &str, tags: &str, has_object_graph: bool) -> Option<String> {
    let (sections, tail) = split_show_all(show_all);
    let (_, sec) = sections.into_iter().find(|(t, _)| t == tags)?;
    Some(if has_object_graph { sec + &tail } else { sec })
}

#[test]
fn graph_fixtures_equal_tensorflows_record() {
    let manifest = load("manifest.json");
    let mut counted = (0, 0, 0);
    for entry in manifest.as_array().expect("manifest") {
        let Some(exp_rel) = entry["expected"].as_str() else {
            continue;
        };
        let source = graphs_dir().join(entry["source"].as_str().unwrap());
        let what = entry["name"].as_str().unwrap().to_string();
        let exp = load(exp_rel);
        let fs = open_fs(&source).unwrap_or_else(|e| panic!("{what}: {e}"));
        if exp["kind"] == "graph_def" {
            let g = GraphDef::decode(common::b64(exp["graph_def"].as_str().unwrap()).as_slice())
                .unwrap();
            counted.0 += check_graph(&fs, b"meta_graphs/graphdef", &g, &what);
            counted.1 += check_constants(&fs, b"meta_graphs/graphdef", &exp["constants"], &what);
            assert!(
                fs.readlink(fs.lookup(ROOT, b"graph").unwrap().ino).unwrap()
                    == b"meta_graphs/graphdef/graph"
            );
            continue;
        }
        // A checkpoint directory mounts each checkpoint in its own directory.
        let top: Vec<u8> = if source.is_dir()
            && !source.join("saved_model.pb").exists()
            && !source.join("saved_model.pbtxt").exists()
        {
            let name = list(&fs, ROOT)
                .unwrap()
                .into_iter()
                .find(|e| e.name != b"." && e.name != b".." && e.name != b"latest")
                .expect("a checkpoint dir")
                .name;
            cat(&[&name, b"/"])
        } else {
            Vec::new()
        };
        let mgs = exp["meta_graphs"].as_array().unwrap();
        for (i, rec) in mgs.iter().enumerate() {
            let mg =
                MetaGraphDef::decode(common::b64(rec["meta_graph"].as_str().unwrap()).as_slice())
                    .unwrap();
            let base = cat(&[
                &top,
                b"meta_graphs/",
                rec["dir"].as_str().unwrap().as_bytes(),
            ]);
            let what = format!("{what} [{}]", rec["dir"]);
            if let Some(g) = &mg.graph_def {
                counted.0 += check_graph(&fs, &base, g, &what);
            }
            counted.1 += check_constants(&fs, &base, &rec["constants"], &what);
            for (k, v) in &mg.signature_def {
                let p = cat(&[
                    &base,
                    b"/signatures/",
                    &common::name_path(k.as_bytes()),
                    b".pbtxt",
                ]);
                same(
                    &parse("tensorflow.SignatureDef", &read_sized(&fs, &p)),
                    v,
                    &format!("{what} signature {k}"),
                );
                counted.2 += 1;
            }
            for (k, v) in &mg.collection_def {
                let p = cat(&[
                    &base,
                    b"/collections/",
                    &common::name_path(k.as_bytes()),
                    b".pbtxt",
                ]);
                same(
                    &parse("tensorflow.CollectionDef", &read_sized(&fs, &p)),
                    v,
                    &format!("{what} collection {k}"),
                );
            }
            if let Some(m) = &mg.meta_info_def {
                let p = cat(&[&base, b"/meta_info_def.pbtxt"]);
                same(
                    &parse("tensorflow.MetaGraphDef.MetaInfoDef", &read_sized(&fs, &p)),
                    m,
                    &what,
                );
            }
            if let Some(m) = &mg.saver_def {
                let p = cat(&[&base, b"/saver_def.pbtxt"]);
                same(
                    &parse("tensorflow.SaverDef", &read_sized(&fs, &p)),
                    m,
                    &what,
                );
            }
            if let Some(m) = &mg.object_graph_def {
                let p = cat(&[&base, b"/object_graph.pbtxt"]);
                same(
                    &parse("tensorflow.SavedObjectGraph", &read_sized(&fs, &p)),
                    m,
                    &what,
                );
            }
            if let Some(sec) = rec["show_all_section"].as_str() {
                // The section ends with the ops line; TF2 models add the concrete functions.
                let tail = exp["show_all_concrete_functions"].as_str().unwrap_or("");
                let want = if mg.object_graph_def.is_some() {
                    format!("{sec}{tail}")
                } else {
                    sec.to_string()
                };
                let got = read_sized(&fs, &cat(&[&base, b"/signatures.txt"]));
                assert_same_show_all(
                    &String::from_utf8_lossy(&got),
                    &want,
                    &format!("{what}: signatures.txt"),
                );
            }
            // The default meta graph's links: `graph` beside `meta_graphs` points into it.
            if i == exp["default_meta_graph"].as_u64().unwrap_or(0) as usize
                && mg.graph_def.is_some()
            {
                let link = lookup_path(&fs, &cat(&[&top, b"graph"]))
                    .ok()
                    .map(|a| a.ino)
                    .expect("graph link");
                let want = cat(&[
                    b"meta_graphs/",
                    rec["dir"].as_str().unwrap().as_bytes(),
                    b"/graph",
                ]);
                assert_eq!(fs.readlink(link).unwrap(), want, "{what}: graph link");
            }
        }
        if exp["kind"] == "saved_model" {
            let want =
                SavedModel::decode(common::b64(exp["saved_model"].as_str().unwrap()).as_slice())
                    .unwrap();
            let got: SavedModel = parse(
                "tensorflow.SavedModel",
                &read_sized(&fs, b"saved_model.pbtxt"),
            );
            same(&got, &want, &format!("{what} saved_model.pbtxt"));
        }
    }
    eprintln!(
        "{} nodes, {} constants, {} signatures equal to TensorFlow's",
        counted.0, counted.1, counted.2
    );
    assert!(
        counted.0 > 300 && counted.1 > 50 && counted.2 > 3,
        "{counted:?}"
    );
}

/// Every meta graph's `signatures.txt` is its part of the real `saved_model_cli show --all`
/// (recorded by `scripts/record_saved_model_cli.py`, a `.meta` wrapped as the only meta graph of
/// a SavedModel): the SignatureDefs, the ops line, and for a TF2 model the `Concrete
/// Functions:` (`tf2_signatures` has every kind of argument). A model with one meta graph is the
/// whole output. Compared line for line except the orders Python does not keep from run to run
/// (`canon_show_all`: the ops set, dict entries, several options of one function).
#[test]
fn signatures_txt_equals_saved_model_cli_show_all() {
    let rel = "graphs/expected/saved_model_cli";
    let man = common::load_json(&format!("{rel}/manifest.json"));
    let mut compared = 0;
    let mut whole = 0;
    for rec in man["fixtures"].as_array().expect("fixtures") {
        let name = rec["name"].as_str().expect("name");
        let source = common::fixtures().join(rec["source"].as_str().expect("source"));
        let file = common::fixtures()
            .join(rel)
            .join(rec["file"].as_str().expect("file"));
        let show_all = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (sections, _) = split_show_all(&show_all);
        let fs = open_fs(&source).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mgs = fs.lookup(ROOT, b"meta_graphs").expect("meta_graphs").ino;
        let dirs: Vec<Vec<u8>> = list(&fs, mgs)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != b"." && n != b"..")
            .collect();
        assert_eq!(dirs.len(), sections.len(), "{name}: meta graphs");
        let mut seen = HashSet::new();
        for d in &dirs {
            let base = cat(&[b"meta_graphs/", d]);
            let got = read_sized(&fs, &cat(&[&base, b"/signatures.txt"]));
            let got = String::from_utf8(got).expect("UTF-8");
            let tags = got
                .strip_prefix("\nMetaGraphDef with tag-set: '")
                .and_then(|s| s.split_once("' contains the following SignatureDefs:"))
                .unwrap_or_else(|| panic!("{name}: header of {got}"))
                .0
                .to_string();
            assert!(seen.insert(tags.clone()), "{name}: tag set {tags} twice");
            let has_og = path_exists(&fs, &cat(&[&base, b"/object_graph.pbtxt"]));
            let want = expected_signatures_txt(&show_all, &tags, has_og)
                .unwrap_or_else(|| panic!("{name}: no section for tag set '{tags}'"));
            let what = format!("{name} [{}]", String::from_utf8_lossy(d));
            assert_same_show_all(&got, &want, &what);
            if dirs.len() == 1 {
                assert_same_show_all(&got, &show_all, &format!("{what}: the whole output"));
                whole += 1;
            }
            compared += 1;
        }
    }
    eprintln!("{compared} signatures.txt equal to saved_model_cli's ({whole} whole outputs)");
    assert!(compared >= 10 && whole >= 7, "{compared} {whole}");
}

/// `names/` links point at the tensor files of the keys TensorFlow's object graph names.
#[test]
fn names_view_follows_the_object_graph() {
    let check = |fs: &Fs, top: &[u8], names: &[(String, String)]| {
        for (name, key) in names {
            let p = cat(&[top, b"names/", &common::name_path(name.as_bytes()), b".bin"]);
            let mut ino = ROOT;
            for c in p.split(|&b| b == b'/') {
                ino = fs
                    .lookup(ino, c)
                    .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(&p)))
                    .ino;
            }
            let depth = name.split('/').count();
            let want = cat(&[
                &b"../".repeat(depth),
                b"variables/",
                &common::name_path(key.as_bytes()),
                b".bin",
            ]);
            assert_eq!(
                String::from_utf8_lossy(&fs.readlink(ino).unwrap()),
                String::from_utf8_lossy(&want),
                "{name}"
            );
            // The target exists and holds the tensor.
            let target = cat(&[
                top,
                b"variables/",
                &common::name_path(key.as_bytes()),
                b".bin",
            ]);
            read_sized(fs, &target);
        }
        names.len()
    };
    let pairs = |v: &Value| -> Vec<(String, String)> {
        match v {
            Value::Object(m) => m
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect(),
            Value::Array(a) => a
                .iter()
                .map(|p| {
                    (
                        p[0].as_str().unwrap().to_string(),
                        p[1].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            _ => Vec::new(),
        }
    };
    let exp = load("expected/tf2_module.json");
    let fs = open_fs(&graphs_dir().join("tf2_module")).unwrap();
    let mut names = pairs(&exp["variable_names"]);
    // TensorFlow's duplicates: the first keeps the name, later ones get `_1`, `_2`, ...
    for (name, keys) in exp["variable_names_duplicates"].as_object().unwrap() {
        for (i, k) in keys.as_array().unwrap().iter().enumerate() {
            let n = if i == 0 {
                name.clone()
            } else {
                format!("{name}_{i}")
            };
            names.push((n, k.as_str().unwrap().to_string()));
        }
    }
    let mut n = check(&fs, b"", &names);
    for f in [
        "expected/names_tf2_keras.json",
        "expected/names_tf2_slots.json",
    ] {
        let exp = load(f);
        let src = graphs_dir().join(exp["source"].as_str().unwrap());
        let fs = open_fs(&src).unwrap();
        let names = pairs(&exp["names"]);
        assert!(
            exp["duplicates"].as_array().is_none_or(|d| d.is_empty())
                || exp["duplicates"].as_object().is_some_and(|d| d.is_empty())
        );
        n += check(&fs, b"", &names);
    }
    assert!(n >= 10, "{n} names checked");
}

/// `names/` also holds each variable's own name as TensorFlow reads it from the object graph
/// (`SerializedTensor.full_name`, `graphs/expected/variable_names.json`): a name one variable has
/// links to its key, a name several have (TF2 does not uniquify) is `name`, `name_1`, ... in node
/// order. Every other entry is an object path (checked above). Keras 3's model variables, whose
/// object paths are `optimizer/_trainable_variables/N`, are found by their Keras paths.
#[test]
fn names_view_holds_the_variable_names() {
    use std::collections::BTreeMap;
    let exp = load("expected/variable_names.json");
    let mut checked = 0;
    for (src, v) in exp["sources"].as_object().unwrap() {
        let fs = open_fs(&graphs_dir().join("..").join(src)).unwrap();
        // Every `.bin` link under names/: name → target.
        let mut got: BTreeMap<String, String> = BTreeMap::new();
        let names = lookup_path(&fs, b"names")
            .ok()
            .map(|a| a.ino)
            .unwrap_or_else(|| panic!("{src}: no names/"));
        let mut stack = vec![(String::new(), names)];
        while let Some((dir, ino)) = stack.pop() {
            for e in list(&fs, ino).unwrap() {
                let n = String::from_utf8(e.name.clone()).unwrap();
                if n == "." || n == ".." {
                    continue;
                }
                match e.kind {
                    Kind::Dir => stack.push((format!("{dir}{n}/"), e.ino)),
                    _ => {
                        if let Some(stem) = n.strip_suffix(".bin") {
                            let t = fs.readlink(e.ino).unwrap();
                            got.insert(format!("{dir}{stem}"), String::from_utf8(t).unwrap());
                        }
                    }
                }
            }
        }
        let attrs = v["attributes"].as_array().unwrap();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for a in attrs {
            let (full, key) = (a[1].as_str().unwrap(), a[2].as_str().unwrap());
            let i = seen.entry(full).or_insert(0);
            let name = if *i == 0 {
                full.to_string()
            } else {
                format!("{full}_{i}")
            };
            *i += 1;
            let depth = name.split('/').count();
            let want = String::from_utf8(cat(&[
                &b"../".repeat(depth),
                b"variables/",
                &common::name_path(key.as_bytes()),
                b".bin",
            ]))
            .unwrap();
            assert_eq!(got.get(&name), Some(&want), "{src}: names/{name}");
            checked += 1;
        }
        for (name, target) in &got {
            let is_full = attrs
                .iter()
                .any(|a| name.starts_with(a[1].as_str().unwrap()));
            let key = target
                .trim_start_matches("../")
                .trim_start_matches("variables/");
            let object_path = key.strip_suffix("/.ATTRIBUTES/VARIABLE_VALUE.bin") == Some(name)
                || key.contains("/.OPTIMIZER_SLOT/");
            assert!(is_full || object_path, "{src}: names/{name} -> {target}");
        }
    }
    assert!(checked >= 40, "{checked} variable names checked");
}

// ---------------------------------------------------------------------------------------------
// Real mounts
// ---------------------------------------------------------------------------------------------

/// Through the kernel: links resolve, files read whole with `std::fs`, `--tags` picks the
/// default meta graph, and TensorFlow's own text_format parses every file back (when a Python
/// with TensorFlow is at hand; CI has none).
#[test]
fn mounted_graphs_through_the_kernel() {
    let src = graphs_dir().join("tf1_two_tags");
    let exp = load("expected/tf1_two_tags.json");
    let mut m = common::Mount::start(&src, &[]);
    let root = m.path();
    // The default meta graph is the one tagged exactly "serve".
    let serve = std::fs::read_link(root.join("graph")).expect("graph link");
    assert_eq!(serve, Path::new("meta_graphs/serve/graph"));
    let mg = MetaGraphDef::decode(
        common::b64(exp["meta_graphs"][0]["meta_graph"].as_str().unwrap()).as_slice(),
    )
    .unwrap();
    let nodes = &mg.graph_def.as_ref().unwrap().node;
    let mut files = 0;
    for n in nodes {
        let rel = String::from_utf8(common::name_path(n.name.as_bytes())).unwrap();
        // Through the link, as a user would.
        let text =
            std::fs::read(root.join("graph").join(format!("{rel}.pbtxt"))).expect("node file");
        let got: NodeDef = parse("tensorflow.NodeDef", &text);
        same(&got, n, &n.name);
        files += 1;
    }
    // `ls -l` sizes are exact: every file's size equals what a read returns.
    for rel in common::walk_files(&root.join("meta_graphs")) {
        let p = root.join("meta_graphs").join(rel);
        let size = std::fs::metadata(&p).unwrap().len();
        let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert_eq!(bytes.len() as u64, size, "{}", p.display());
    }
    let sm = std::fs::read(root.join("saved_model.pbtxt")).unwrap();
    let got: SavedModel = parse("tensorflow.SavedModel", &sm);
    same(
        &got,
        &SavedModel::decode(common::b64(exp["saved_model"].as_str().unwrap()).as_slice()).unwrap(),
        "saved_model.pbtxt",
    );
    assert!(
        std::fs::write(root.join("graph/x.pbtxt"), b"x").is_err(),
        "read-only"
    );
    if let Some(tf) = common::requires::python("tensorflow", "") {
        let out = std::process::Command::new(tf)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_pbtxt.py"))
            .arg(&root)
            .arg(graphs_dir().join("expected/tf1_two_tags.json"))
            .output()
            .expect("check_pbtxt.py");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "TensorFlow's text_format disagrees:\n{text}"
        );
        eprintln!("check_pbtxt.py: {}", text.lines().last().unwrap_or(""));
    }
    assert_eq!(m.unmount(), Some(0));
    assert!(files > 50);

    // --tags picks another meta graph; a tag set no meta graph has is a mount-time error.
    let mut m = common::Mount::start(&src, &["--tags", "gpu,train"]);
    assert_eq!(
        std::fs::read_link(m.path().join("graph")).unwrap(),
        Path::new("meta_graphs/train,gpu/graph")
    );
    assert_eq!(m.unmount(), Some(0));
    let dir = tempfile::tempdir().unwrap();
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["--tags", "nope"])
        .arg(&src)
        .arg(dir.path())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        st.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    assert!(String::from_utf8_lossy(&st.stderr).contains("no meta graph has the tag set"));
    // Also where there is only one meta graph: `--tags gpu` on a `serve`-only SavedModel is
    // refused, naming the tag sets there are (it mounted `serve` silently).
    let demo = common::fixtures().join("demo_savedmodel");
    let st = std::process::Command::new(env!("CARGO_BIN_EXE_tfmount"))
        .args(["--tags", "gpu"])
        .arg(&demo)
        .arg(dir.path())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&st.stderr);
    assert_eq!(st.status.code(), Some(3), "{err}");
    assert!(
        err.contains("no meta graph has the tag set \"gpu\" (it has: serve)"),
        "{err}"
    );
}

/// `names/` symlinks resolve through the kernel to the same bytes as `variables/`.
#[test]
fn mounted_names_resolve_to_variables() {
    let exp = load("expected/tf2_module.json");
    let mut m = common::Mount::start(&graphs_dir().join("tf2_module"), &[]);
    let root = m.path();
    for (name, key) in exp["variable_names"].as_object().unwrap() {
        let key = key.as_str().unwrap();
        for suffix in [".bin", ".shape", ".dtype"] {
            let via = std::fs::read(root.join("names").join(format!("{name}{suffix}"))).unwrap();
            let direct = root.join("variables").join(format!(
                "{}{suffix}",
                String::from_utf8(common::name_path(key.as_bytes())).unwrap()
            ));
            assert_eq!(via, std::fs::read(direct).unwrap(), "{name}{suffix}");
        }
    }
    assert_eq!(m.unmount(), Some(0));
}

/// A 30 000-node graph (names nested three deep, a few hundred per directory): listing in small
/// chunks (cookies resumed as a kernel with a small buffer does) finds every node exactly once,
/// and each listed name looks up to the listed inode.
#[test]
fn large_graph_lists_every_node_once_in_chunks() {
    use std::collections::BTreeSet;
    let n = 30_000;
    let names: Vec<String> = (0..n)
        .map(|i| format!("block_{}/layer_{}/op_{}", i / 1000, i / 10 % 100, i % 10))
        .chain(["block_0".to_string(), "block_0/layer_1".to_string()])
        .collect();
    let g = GraphDef {
        node: names
            .iter()
            .rev()
            .map(|name| NodeDef {
                name: name.clone(),
                op: "NoOp".into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pb");
    std::fs::write(&path, g.encode_to_vec()).unwrap();
    let fs = open_fs(&path).unwrap();
    let graph = lookup_path(&fs, b"meta_graphs/graphdef/graph")
        .ok()
        .map(|a| a.ino)
        .expect("graph dir");
    let mut found = BTreeSet::new();
    let mut stack = vec![(graph, String::new())];
    while let Some((ino, prefix)) = stack.pop() {
        let mut cookie = 0;
        loop {
            let mut batch = Vec::new();
            fs.readdir(ino, cookie, |e| {
                batch.push(e);
                batch.len() >= 7
            })
            .unwrap();
            let Some(last) = batch.last() else { break };
            cookie = last.cookie;
            for e in batch {
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let name = String::from_utf8(e.name.clone()).unwrap();
                assert_eq!(
                    fs.lookup(ino, &e.name).unwrap().ino,
                    e.ino,
                    "{prefix}{name}"
                );
                if e.kind == Kind::Dir {
                    stack.push((e.ino, format!("{prefix}{name}/")));
                } else {
                    let stem = name.strip_suffix(".pbtxt").expect(".pbtxt");
                    assert!(
                        found.insert(format!("{prefix}{stem}")),
                        "listed twice: {prefix}{name}"
                    );
                }
            }
        }
    }
    assert_eq!(found, names.into_iter().collect::<BTreeSet<_>>());
}

/// A TF Hub TF1 module (`tfhub_module.pb`, `saved_model.pb` with meta graphs tagged `{}` and
/// `{"train"}`, `variables/`, `assets/`), written by `tensorflow_hub`'s own `Module.export`
/// (`scripts/gen_tfhub_module.py`): mounts as a SavedModel whose `graph` is the untagged meta
/// graph (the one `hub.Module` loads), with its vocabulary asset, and its variables compute what
/// `hub.Module` computed with them. (Every node, signature and constant against TensorFlow's
/// record: `graph_fixtures_equal_tensorflows_record`; the variables with every view:
/// tests/core/conformance.rs.)
#[test]
fn tf_hub_tf1_module_mounts_with_its_graphs_and_variables() {
    let fs = open_fs(&graphs_dir().join("tfhub_tf1_module")).expect("the module mounts");
    let m = load("expected/tfhub_tf1_module.module.json");
    assert_eq!(
        fs.readlink(
            lookup_path(&fs, b"graph")
                .ok()
                .map(|a| a.ino)
                .expect("graph link")
        )
        .unwrap(),
        b"meta_graphs/untagged/graph"
    );
    for tags in ["untagged", "train"] {
        for sig in ["default", "dense"] {
            let p = format!("meta_graphs/{tags}/signatures/{sig}.pbtxt");
            assert!(path_exists(&fs, p.as_bytes()), "{p}");
        }
    }
    let vocab = read_sized(&fs, b"assets/vocab.txt");
    let words: Vec<&str> = std::str::from_utf8(&vocab).unwrap().lines().collect();
    let floats = |p: &[u8]| -> Vec<f32> {
        read_sized(&fs, p)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let (emb, kernel, bias) = (
        floats(b"variables/embeddings.bin"),
        floats(b"variables/dense/kernel.bin"),
        floats(b"variables/dense/bias.bin"),
    );
    assert_eq!(
        (emb.len(), kernel.len(), bias.len()),
        (words.len() * 4, 12, 3)
    );
    let dense = |x: &[f32]| -> Vec<f32> {
        (0..3)
            .map(|j| bias[j] + (0..4).map(|i| x[i] * kernel[i * 3 + j]).sum::<f32>())
            .collect()
    };
    let close = |got: &[f32], want: &Value, what: &str| {
        let want: Vec<f32> = want
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect();
        assert_eq!(got.len(), want.len(), "{what}");
        for (a, b) in got.iter().zip(&want) {
            assert!(
                (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                "{what}: {got:?} vs {want:?}"
            );
        }
    };
    // The default signature: the word's row of the embeddings (unknown words: row 0), then dense.
    for (i, w) in m["text"].as_array().unwrap().iter().enumerate() {
        let row = words
            .iter()
            .position(|x| *x == w.as_str().unwrap())
            .unwrap_or(0);
        close(
            &dense(&emb[row * 4..row * 4 + 4]),
            &m["default"][i],
            w.as_str().unwrap(),
        );
    }
    close(&dense(&[1.0; 4]), &m["dense_of_ones"][0], "dense of ones");
    assert_eq!(
        read_sized(&fs, b"variables/global_step.bin"),
        7i64.to_le_bytes()
    );
}
