//! `signatures.txt`: one meta graph's part of `saved_model_cli show --all` (TensorFlow's
//! `saved_model_cli._show_all`). It holds, as that command prints them:
//!
//! 1. `MetaGraphDef with tag-set: '<tags>' contains the following SignatureDefs:` and every
//!    SignatureDef (sorted by key) with its inputs and outputs;
//! 2. `The MetaGraph with tag set [<tags>] contains the following ops: {...}`: the ops the graph
//!    uses (`meta_graph.ops_used_by_graph_def`). Python prints that set in hash order, which
//!    changes from run to run; it is printed sorted here;
//! 3. when the meta graph has an object graph (a TF2 SavedModel), the `Concrete Functions:`
//!    section (see `concrete.rs`), which `show --all` prints once, after the last meta graph.
//!
//! So the `signatures.txt` of a SavedModel's only meta graph is the whole `show --all` output,
//! and for several meta graphs the output is their files' sections 1-2 in tag order, then 3.

use std::collections::{HashMap, HashSet};
use std::fmt::Write;
use std::ops::Range;

use prost::Message;

use crate::graph::GraphFile;
use crate::parse::wire;
use crate::parse::wire::{Field, LEN};
use crate::render::concrete;
use crate::render::pyrepr::{str_list_repr, str_set_repr};

/// The enum value name of a DataType (`DT_FLOAT`), or its number.
fn dtype_enum_name(v: i32) -> String {
    crate::descriptors::enum_value_name("tensorflow.DataType", v)
}

/// The whole `signatures.txt` of meta graph `mg` of `file`.
pub(crate) fn signatures_txt(file: &GraphFile, mg: usize) -> Result<Vec<u8>, String> {
    let m = file.metas.get(mg).ok_or("no such meta graph")?;
    let buf = file.bytes();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nMetaGraphDef with tag-set: '{}' contains the following SignatureDefs:",
        m.tags.join(", ")
    );
    for it in &m.signatures.items {
        let key = String::from_utf8_lossy(it.name(buf));
        let body = buf.get(it.body()).ok_or("range outside the file")?;
        let sig = crate::proto::SignatureDef::decode(body).map_err(|e| e.to_string())?;
        let _ = writeln!(out, "\nsignature_def['{key}']:");
        let _ = writeln!(
            out,
            "  The given SavedModel SignatureDef contains the following input(s):"
        );
        let mut inputs: Vec<_> = sig.inputs.iter().collect();
        inputs.sort_by(|a, b| a.0.cmp(b.0));
        for (k, t) in inputs {
            let _ = writeln!(out, "    inputs['{k}'] tensor_info:");
            tensor_info(&mut out, t);
        }
        let _ = writeln!(
            out,
            "  The given SavedModel SignatureDef contains the following output(s):"
        );
        let mut outputs: Vec<_> = sig.outputs.iter().collect();
        outputs.sort_by(|a, b| a.0.cmp(b.0));
        for (k, t) in outputs {
            let _ = writeln!(out, "    outputs['{k}'] tensor_info:");
            tensor_info(&mut out, t);
        }
        let _ = writeln!(out, "  Method name is: {}", sig.method_name);
    }
    let ops = ops_used(buf, &m.graph_def).map_err(|e| format!("graph_def: {e}"))?;
    let _ = writeln!(
        out,
        "The MetaGraph with tag set {} contains the following ops: {}",
        str_list_repr(&m.tags),
        str_set_repr(&ops)
    );
    if let Some(section) = concrete::section(file, mg) {
        out.push_str(&section);
    }
    Ok(out.into_bytes())
}

/// `saved_model_cli._print_tensor_info` at indent 2.
fn tensor_info(out: &mut String, t: &crate::proto::TensorInfo) {
    let _ = writeln!(out, "        dtype: {}", dtype_enum_name(t.dtype));
    let shape = match &t.tensor_shape {
        Some(s) if s.unknown_rank => "unknown_rank".to_string(),
        s => {
            let dims: Vec<String> = s
                .iter()
                .flat_map(|s| s.dim.iter())
                .map(|d| d.size.to_string())
                .collect();
            format!("({})", dims.join(", "))
        }
    };
    let _ = writeln!(out, "        shape: {shape}");
    let name = match &t.encoding {
        Some(crate::proto::tensor_info::Encoding::Name(n)) => n.as_str(),
        _ => "",
    };
    let _ = writeln!(out, "        name: {name}");
}

const CALL_OPS: [&[u8]; 2] = [b"PartitionedCall", b"StatefulPartitionedCall"];

/// The ops a GraphDef (the merged `graph_def` fields) uses, sorted, as TensorFlow's
/// `ops_used_by_graph_def` finds them: the `op` of every node, and of every node of each
/// library function reached from a node whose op is that function's name or from the `f`
/// attr of a (Stateful)PartitionedCall; function names themselves are not ops. Scanned on the
/// wire (nothing is decoded whole), so a graph near 2 GB costs one pass.
pub(crate) fn ops_used(buf: &[u8], graph_def: &[Field]) -> Result<Vec<String>, String> {
    let e = |e: crate::parse::FormatError| e.to_string();
    // Function name -> FunctionDef (the last of a name wins, as in TensorFlow's dict).
    let mut library: HashMap<&[u8], Range<usize>> = HashMap::new();
    for g in graph_def {
        for f in wire::fields_in(buf, g.payload_range()) {
            let f = f.map_err(e)?;
            if (f.number, f.wire) != (2, LEN) {
                continue;
            }
            for l in wire::fields_in(buf, f.payload_range()) {
                let l = l.map_err(e)?;
                if (l.number, l.wire) == (1, LEN) {
                    let name = match wire::last_len(buf, l.payload_range(), 1).map_err(e)? {
                        Some(sig) => wire::last_len(buf, sig.payload_range(), 1)
                            .map_err(e)?
                            .map_or(&[][..], |n| &buf[n.payload_range()]),
                        None => &[][..],
                    };
                    library.insert(name, l.payload_range());
                }
            }
        }
    }
    let mut used: HashSet<&[u8]> = HashSet::new();
    let mut todo: Vec<Range<usize>> = Vec::new();
    for g in graph_def {
        for f in wire::fields_in(buf, g.payload_range()) {
            let f = f.map_err(e)?;
            if (f.number, f.wire) == (1, LEN) {
                visit(buf, &library, f.payload_range(), &mut used, &mut todo)?;
            }
        }
    }
    while let Some(body) = todo.pop() {
        for n in wire::fields_in(buf, body) {
            let n = n.map_err(e)?;
            if (n.number, n.wire) == (3, LEN) {
                visit(buf, &library, n.payload_range(), &mut used, &mut todo)?;
            }
        }
    }
    let mut ops: Vec<String> = used
        .into_iter()
        .filter(|op| !library.contains_key(op))
        .map(|op| String::from_utf8_lossy(op).into_owned())
        .collect();
    ops.sort_unstable();
    Ok(ops)
}

/// Marks the op of `node` (and the function its `f` attr calls) used, queueing the library
/// functions seen for the first time.
fn visit<'a>(
    buf: &'a [u8],
    library: &HashMap<&'a [u8], Range<usize>>,
    node: Range<usize>,
    used: &mut HashSet<&'a [u8]>,
    todo: &mut Vec<Range<usize>>,
) -> Result<(), String> {
    let (op, f) = node_op_and_f(buf, node).map_err(|e| e.to_string())?;
    for name in std::iter::once(op).chain(f) {
        if used.insert(name) {
            if let Some(body) = library.get(name) {
                todo.push(body.clone());
            }
        }
    }
    Ok(())
}

/// A NodeDef's `op` (empty when absent) and, for a (Stateful)PartitionedCall, the function its
/// `f` attr names (`node.attr["f"].func.name`: empty when the attr is absent or not a func).
type OpAndF<'a> = (&'a [u8], Option<&'a [u8]>);

fn node_op_and_f(buf: &[u8], node: Range<usize>) -> crate::parse::Result<OpAndF<'_>> {
    let op = wire::last_len(buf, node.clone(), 2)?.map_or(&[][..], |f| &buf[f.payload_range()]);
    if !CALL_OPS.contains(&op) {
        return Ok((op, None));
    }
    // The last map entry keyed "f" wins.
    let mut f_value = None;
    for a in wire::fields_in(buf, node) {
        let a = a?;
        if (a.number, a.wire) != (5, LEN) {
            continue;
        }
        let key = wire::last_len(buf, a.payload_range(), 1)?;
        if key.is_some_and(|k| &buf[k.payload_range()] == b"f") {
            f_value = Some(wire::last_len(buf, a.payload_range(), 2)?);
        }
    }
    let mut name: &[u8] = &[];
    if let Some(Some(v)) = f_value {
        // AttrValue's oneof: the last member on the wire is the value; `func` is field 10.
        let mut func_name = None;
        let mut last_member = 0;
        for x in wire::fields_in(buf, v.payload_range()) {
            let x = x?;
            if (1..=10).contains(&x.number) {
                last_member = x.number;
                if x.number == 10 && x.wire == LEN {
                    if let Some(n) = wire::last_len(buf, x.payload_range(), 1)? {
                        func_name = Some(&buf[n.payload_range()]);
                    }
                }
            }
        }
        if last_member == 10 {
            name = func_name.unwrap_or(&[]);
        }
    }
    Ok((op, Some(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{
        attr_value, AttrValue, FunctionDef, FunctionDefLibrary, GraphDef, NameAttrList, NodeDef,
        OpDef,
    };

    fn node(name: &str, op: &str, f: Option<AttrValue>) -> NodeDef {
        let mut n = NodeDef {
            name: name.into(),
            op: op.into(),
            ..Default::default()
        };
        if let Some(f) = f {
            n.attr.insert("f".into(), f);
        }
        n
    }

    fn func(name: &str) -> AttrValue {
        AttrValue {
            value: Some(attr_value::Value::Func(NameAttrList {
                name: name.into(),
                ..Default::default()
            })),
        }
    }

    fn fdef(name: &str, nodes: Vec<NodeDef>) -> FunctionDef {
        FunctionDef {
            signature: Some(OpDef {
                name: name.into(),
                ..Default::default()
            }),
            node_def: nodes,
            ..Default::default()
        }
    }

    fn ops_of(g: &GraphDef) -> Vec<String> {
        let buf = g.encode_to_vec();
        ops_used(&buf, &[Field::whole(2, buf.len())]).unwrap()
    }

    #[test]
    fn ops_follow_calls_like_tensorflow() {
        let g = GraphDef {
            node: vec![
                node("a", "Placeholder", None),
                node("b", "StatefulPartitionedCall", Some(func("f1"))),
                node("c", "my_fn", None),
                // Not followed: only (Stateful)PartitionedCall's `f`.
                node("d", "If", Some(func("unreached"))),
                // A call whose `f` is not a func: Python marks "" as used.
                node("e", "PartitionedCall", Some(AttrValue::default())),
            ],
            library: Some(FunctionDefLibrary {
                function: vec![
                    fdef("f1", vec![node("x", "MatMul", None)]),
                    fdef(
                        "my_fn",
                        vec![node("y", "PartitionedCall", Some(func("f2")))],
                    ),
                    fdef("f2", vec![node("z", "Relu", None)]),
                    fdef("unreached", vec![node("w", "Sigmoid", None)]),
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            ops_of(&g),
            [
                "",
                "If",
                "MatMul",
                "PartitionedCall",
                "Placeholder",
                "Relu",
                "StatefulPartitionedCall"
            ]
        );
        assert_eq!(ops_of(&GraphDef::default()), Vec::<String>::new());
    }

    #[test]
    fn damaged_graphs_are_errors() {
        let g = GraphDef {
            node: vec![node("b", "StatefulPartitionedCall", Some(func("f1")))],
            ..Default::default()
        };
        let buf = g.encode_to_vec();
        for cut in 0..buf.len() {
            let f = Field {
                number: 2,
                wire: LEN,
                value: cut as u64,
                start: 0,
                end: cut,
                payload: 0,
            };
            let _ = ops_used(&buf[..cut], &[f]);
        }
        let f = Field {
            number: 2,
            wire: LEN,
            value: 3,
            start: 0,
            end: 3,
            payload: 0,
        };
        assert!(ops_used(&[0x0a, 0xff, 0xff], &[f]).is_err());
    }
}
