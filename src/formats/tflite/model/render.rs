//! A TFLite model's structure as text: `model.txt`, `subgraph.txt`, one file per operator
//! (`graph/0003_CONV_2D.txt`), `signatures.txt`, and a sparse tensor's parameters in one line.
//! Every text is bounded: names are cut at [`MAX_NAME`] bytes, a file at [`MAX_FILE`], and the
//! operator files of one model share [`MAX_GRAPH`] bytes (a hostile model could otherwise name
//! a long tensor a million times).

use std::fmt::Write;

use super::{dtype_name, Buffer, Model, Subgraph};
use crate::formats::tflite::model::schema_generated::tflite as fb;

/// A tensor name in a text is cut after this many bytes.
pub(crate) const MAX_NAME: usize = 1024;
/// One rendered file is cut after this many bytes.
pub(crate) const MAX_FILE: usize = 1 << 20;
/// The operator files of one model hold at most this many bytes together.
pub(crate) const MAX_GRAPH: usize = 64 << 20;

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut i = max;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    &s[..i]
}

/// `s` cut to [`MAX_FILE`] bytes, with a last line saying so.
fn bounded(mut s: String) -> String {
    if s.len() > MAX_FILE {
        let n = cut(&s, MAX_FILE).len();
        s.truncate(n);
        s.push_str("\n... (cut: this text is longer than 1 MiB)\n");
    }
    s
}

/// `index name` of tensor `i` of a subgraph (`-1`: an omitted optional input).
fn tensor_ref(sg: &Subgraph, i: i64) -> String {
    if i < 0 {
        return format!("{i} (none)");
    }
    match usize::try_from(i).ok().and_then(|i| sg.tensors.get(i)) {
        Some(t) => format!("{i} {}", cut(&t.name, MAX_NAME)),
        None => format!("{i} (no such tensor)"),
    }
}

fn dtype(t: i8) -> String {
    dtype_name(t).map_or_else(|| format!("type {t}"), str::to_string)
}

fn list<T: std::fmt::Display>(v: &[T]) -> String {
    let s: Vec<String> = v.iter().map(ToString::to_string).collect();
    format!("[{}]", s.join(", "))
}

/// A sparse tensor's parameters, on one line.
pub(crate) fn sparsity(s: &fb::SparsityParameters<'_>) -> String {
    let ints = |v: Option<flatbuffers::Vector<'_, i32>>| -> Vec<i32> {
        v.map(|v| v.iter().collect()).unwrap_or_default()
    };
    let len = |t: fb::SparseIndexVector,
               i: Option<fb::Int32Vector<'_>>,
               u16v: Option<fb::Uint16Vector<'_>>,
               u8v: Option<fb::Uint8Vector<'_>>| {
        match t {
            fb::SparseIndexVector::Int32Vector => i.and_then(|v| v.values()).map(|v| v.len()),
            fb::SparseIndexVector::Uint16Vector => u16v.and_then(|v| v.values()).map(|v| v.len()),
            fb::SparseIndexVector::Uint8Vector => u8v.and_then(|v| v.values()).map(|v| v.len()),
            _ => None,
        }
        .unwrap_or(0)
    };
    let mut dims = Vec::new();
    for d in s.dim_metadata().iter().flatten() {
        if d.format() == fb::DimensionType::SPARSE_CSR {
            let seg = len(
                d.array_segments_type(),
                d.array_segments_as_int_32_vector(),
                d.array_segments_as_uint_16_vector(),
                d.array_segments_as_uint_8_vector(),
            );
            let idx = len(
                d.array_indices_type(),
                d.array_indices_as_int_32_vector(),
                d.array_indices_as_uint_16_vector(),
                d.array_indices_as_uint_8_vector(),
            );
            dims.push(format!("SPARSE_CSR(segments {seg}, indices {idx})"));
        } else {
            dims.push(format!("DENSE({})", d.dense_size()));
        }
    }
    format!(
        "traversal_order {}; block_map {}; dim_metadata {}",
        list(&ints(s.traversal_order())),
        list(&ints(s.block_map())),
        dims.join(" ")
    )
}

/// `model.txt`: the model's version, description, subgraphs, buffers, metadata entries and
/// signatures in a few lines. `metadata`: the text of each `Model.metadata` entry where it is
/// short printable text (`min_runtime_version`), else its size.
pub(crate) fn model_txt(m: &Model, file_len: u64, metadata: &[(String, String)]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "format: TensorFlow Lite (file identifier TFL3)");
    let _ = writeln!(s, "schema version: {}", m.version);
    let _ = writeln!(
        s,
        "description: {}",
        m.description
            .as_deref()
            .map_or("(none)", |d| cut(d, MAX_FILE / 2))
    );
    let _ = writeln!(s, "file bytes: {file_len}");
    let _ = writeln!(s, "flatbuffer bytes (verified): {}", m.span);
    let external = m
        .buffers
        .iter()
        .filter(|b| matches!(b, Buffer::External { .. }))
        .count();
    let _ = writeln!(
        s,
        "buffers: {} ({} stored after the flatbuffer)",
        m.buffers.len(),
        external
    );
    let _ = writeln!(s, "operator codes: {}", m.operator_codes.len());
    let _ = writeln!(s, "subgraphs: {}", m.subgraphs.len());
    for (i, sg) in m.subgraphs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  {i}: {} ({} tensors, {} operators)",
            sg.name.as_deref().map_or("(no name)", |n| cut(n, MAX_NAME)),
            sg.tensors.len(),
            sg.operators.len()
        );
    }
    let _ = writeln!(s, "signatures: {}", m.signatures.len());
    for sig in &m.signatures {
        let _ = writeln!(
            s,
            "  {} (subgraph {})",
            cut(&sig.key, MAX_NAME),
            sig.subgraph
        );
    }
    let _ = writeln!(s, "metadata: {}", metadata.len());
    for (name, text) in metadata {
        let _ = writeln!(s, "  {}: {text}", cut(name, MAX_NAME));
    }
    bounded(s)
}

/// `subgraph.txt`: a subgraph's index, name, inputs and outputs.
pub(crate) fn subgraph_txt(m: &Model, k: usize) -> String {
    let Some(sg) = m.subgraphs.get(k) else {
        return String::new();
    };
    let mut s = String::new();
    let _ = writeln!(s, "subgraph: {k}");
    let _ = writeln!(
        s,
        "name: {}",
        sg.name.as_deref().map_or("(none)", |n| cut(n, MAX_NAME))
    );
    let _ = writeln!(s, "tensors: {}", sg.tensors.len());
    let _ = writeln!(s, "operators: {}", sg.operators.len());
    for (what, v) in [("inputs", &sg.inputs), ("outputs", &sg.outputs)] {
        let _ = writeln!(s, "{what}:");
        for &i in v.iter() {
            let t = usize::try_from(i).ok().and_then(|i| sg.tensors.get(i));
            let _ = writeln!(
                s,
                "  {} {} {}",
                tensor_ref(sg, i64::from(i)),
                t.map_or_else(String::new, |t| dtype(t.dtype)),
                t.map_or_else(String::new, |t| list(&t.shape))
            );
        }
    }
    bounded(s)
}

/// The file names of subgraph `k`'s operators (`0003_CONV_2D.txt`: the index, zero-padded to
/// sort, and the builtin name or custom code made a file name) and their texts, together at most
/// [`MAX_GRAPH`] bytes; operators past that get a one-line text saying so.
pub(crate) fn operators(m: &Model, k: usize) -> Vec<(String, String)> {
    let Some(sg) = m.subgraphs.get(k) else {
        return Vec::new();
    };
    let width = sg
        .operators
        .len()
        .saturating_sub(1)
        .to_string()
        .len()
        .max(4);
    let mut budget = MAX_GRAPH;
    let mut out = Vec::with_capacity(sg.operators.len());
    for (i, op) in sg.operators.iter().enumerate() {
        let code = usize::try_from(op.opcode_index)
            .ok()
            .and_then(|c| m.operator_codes.get(c));
        let opname = code.map_or_else(|| "UNKNOWN".to_string(), |c| c.name());
        let safe: String = cut(&opname, 64)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let file = format!("{i:0width$}_{safe}.txt");
        if budget == 0 {
            out.push((
                file,
                "not rendered: the operators' texts of this model exceed 64 MiB\n".to_string(),
            ));
            continue;
        }
        let mut s = String::new();
        let _ = writeln!(s, "index: {i}");
        match code {
            Some(c) => {
                let _ = writeln!(
                    s,
                    "opcode: {} {} (operator code {}, version {})",
                    c.code,
                    cut(&opname, MAX_NAME),
                    op.opcode_index,
                    c.version
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "opcode: (operator code {} does not exist)",
                    op.opcode_index
                );
            }
        }
        for (what, v) in [
            ("inputs", &op.inputs),
            ("outputs", &op.outputs),
            ("intermediates", &op.intermediates),
        ] {
            if v.is_empty() && what == "intermediates" {
                continue;
            }
            let _ = writeln!(s, "{what}:");
            for &t in v.iter() {
                let _ = writeln!(s, "  {}", tensor_ref(sg, i64::from(t)));
                if s.len() > MAX_FILE {
                    break;
                }
            }
        }
        // The text starts with the union member's name (`Conv2DOptions { padding: SAME, ... }`).
        for (_, text) in &op.options {
            let _ = writeln!(s, "options: {}", cut(text, MAX_FILE));
        }
        if op.custom_options > 0 {
            let _ = writeln!(s, "custom options: {} bytes", op.custom_options);
        }
        let s = bounded(s);
        budget = budget.saturating_sub(s.len());
        out.push((file, s));
    }
    out
}

/// `signatures.txt`: each SignatureDef's key, subgraph, and its inputs and outputs by alias,
/// with the tensor each names (index, name, dtype, shape).
pub(crate) fn signatures_txt(m: &Model) -> String {
    let mut s = String::new();
    for sig in &m.signatures {
        let sg = usize::try_from(sig.subgraph)
            .ok()
            .and_then(|k| m.subgraphs.get(k));
        let _ = writeln!(
            s,
            "signature {:?} (subgraph {})",
            cut(&sig.key, MAX_NAME),
            sig.subgraph
        );
        for (what, v) in [("inputs", &sig.inputs), ("outputs", &sig.outputs)] {
            let _ = writeln!(s, "  {what}:");
            for (alias, t) in v.iter() {
                let desc = match sg {
                    Some(sg) => {
                        let tt = usize::try_from(*t).ok().and_then(|i| sg.tensors.get(i));
                        format!(
                            "{} {} {}",
                            tensor_ref(sg, i64::from(*t)),
                            tt.map_or_else(String::new, |t| dtype(t.dtype)),
                            tt.map_or_else(String::new, |t| list(&t.shape))
                        )
                    }
                    None => format!("{t} (no such subgraph)"),
                };
                let _ = writeln!(s, "    {}: {desc}", cut(alias, MAX_NAME));
            }
            if s.len() > MAX_FILE {
                break;
            }
        }
    }
    bounded(s)
}
