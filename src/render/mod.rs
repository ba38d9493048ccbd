//! Protobuf text renderings of graph messages (prost-reflect's text format over the descriptors
//! build.rs compiles), and a bounded cache of rendered files.

pub(crate) mod concrete;
pub mod elem;
pub(crate) mod escape;
pub(crate) mod pyrepr;
pub(crate) mod signatures;
pub mod stats;
pub(crate) mod structured;
pub(crate) mod summary;
pub mod values;

pub(crate) use signatures::signatures_txt;

use std::ops::Range;

use prost_reflect::text_format::FormatOptions;
use prost_reflect::DynamicMessage;

use crate::descriptors::descriptor;
use crate::parse::wire;

/// Renders the message of type `type_name` encoded by the concatenation of `parts` of `buf`
/// (several occurrences of a message field merge, as in the binary format). Multi-line text with
/// two-space indentation, ending in a newline unless empty.
pub fn message_text(
    type_name: &str,
    buf: &[u8],
    parts: &[Range<usize>],
) -> Result<Vec<u8>, String> {
    let desc = descriptor(type_name).ok_or_else(|| format!("no descriptor for {type_name}"))?;
    let bytes: Vec<u8>;
    let input: &[u8] = match parts {
        [one] => buf.get(one.clone()).ok_or("range outside the file")?,
        _ => {
            let mut v = Vec::new();
            for p in parts {
                v.extend_from_slice(buf.get(p.clone()).ok_or("range outside the file")?);
            }
            bytes = v;
            &bytes
        }
    };
    let msg = DynamicMessage::decode(desc, input).map_err(|e| e.to_string())?;
    let mut text = msg
        .to_text_format_with_options(&FormatOptions::new().pretty(true))
        .into_bytes();
    if !text.is_empty() && text.last() != Some(&b'\n') {
        text.push(b'\n');
    }
    Ok(text)
}

/// `buf[range]` without the occurrences of field `number` (a message minus one field).
pub(crate) fn without_field(
    buf: &[u8],
    range: Range<usize>,
    number: u32,
) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(range.len());
    for f in wire::fields_in(buf, range) {
        let f = f.map_err(|e| e.to_string())?;
        if f.number != number {
            out.extend_from_slice(&buf[f.start..f.end]);
        }
    }
    Ok(out)
}

/// Prefixes every line of `text` with `spaces` spaces (text-format strings never hold a raw
/// newline, so lines are safe to indent).
pub(crate) fn indent(text: &[u8], spaces: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + text.len() / 16 * spaces);
    for line in text.split_inclusive(|&b| b == b'\n') {
        out.extend(std::iter::repeat_n(b' ', spaces));
        out.extend_from_slice(line);
    }
    out
}

/// One piece of a file rendered piece by piece: literal text, or a message of type `ty` made of
/// the raw fields `parts`, rendered and indented by `indent` spaces.
#[derive(Debug, Clone)]
pub(crate) enum Piece {
    Lit(&'static str),
    Msg {
        ty: &'static str,
        parts: Vec<Range<usize>>,
        indent: usize,
    },
}

pub(crate) fn render_piece(buf: &[u8], p: &Piece) -> Result<Vec<u8>, String> {
    match p {
        Piece::Lit(s) => Ok(s.as_bytes().to_vec()),
        Piece::Msg { ty, parts, indent } => {
            let t = message_text(ty, buf, parts)?;
            Ok(indent_text(&t, *indent))
        }
    }
}

fn indent_text(t: &[u8], n: usize) -> Vec<u8> {
    if n == 0 {
        t.to_vec()
    } else {
        indent(t, n)
    }
}

/// A SavedModel as protobuf text, in pieces small enough to render one at a time: each graph
/// node and each library function is its own piece, so a graph near 2 GB streams. Fields a
/// message has once are rendered together (text format forbids repeating them).
pub(crate) fn saved_model_pieces(buf: &[u8]) -> Result<Vec<Piece>, String> {
    let e = |e: crate::parse::FormatError| e.to_string();
    let raw = |f: &wire::Field| f.start..f.end;
    let mut out = Vec::new();
    let mut top_rest = Vec::new();
    for f in wire::fields(buf) {
        let f = f.map_err(e)?;
        if f.number != 2 || f.wire != wire::LEN {
            top_rest.push(raw(&f));
            continue;
        }
        out.push(Piece::Lit("meta_graphs {\n"));
        let mut mg_rest = Vec::new();
        for g in wire::fields_in(buf, f.payload_range()) {
            let g = g.map_err(e)?;
            if g.number != 2 || g.wire != wire::LEN {
                mg_rest.push(raw(&g));
                continue;
            }
            out.push(Piece::Lit("  graph_def {\n"));
            let mut gd_rest = Vec::new();
            for n in wire::fields_in(buf, g.payload_range()) {
                let n = n.map_err(e)?;
                match (n.number, n.wire) {
                    (1, wire::LEN) => out.push(Piece::Msg {
                        ty: "tensorflow.GraphDef",
                        parts: vec![raw(&n)],
                        indent: 4,
                    }),
                    (2, wire::LEN) => {
                        out.push(Piece::Lit("    library {\n"));
                        let mut lib_rest = Vec::new();
                        for l in wire::fields_in(buf, n.payload_range()) {
                            let l = l.map_err(e)?;
                            if l.number == 1 && l.wire == wire::LEN {
                                out.push(Piece::Msg {
                                    ty: "tensorflow.FunctionDefLibrary",
                                    parts: vec![raw(&l)],
                                    indent: 6,
                                });
                            } else {
                                lib_rest.push(raw(&l));
                            }
                        }
                        if !lib_rest.is_empty() {
                            out.push(Piece::Msg {
                                ty: "tensorflow.FunctionDefLibrary",
                                parts: lib_rest,
                                indent: 6,
                            });
                        }
                        out.push(Piece::Lit("    }\n"));
                    }
                    _ => gd_rest.push(raw(&n)),
                }
            }
            if !gd_rest.is_empty() {
                out.push(Piece::Msg {
                    ty: "tensorflow.GraphDef",
                    parts: gd_rest,
                    indent: 4,
                });
            }
            out.push(Piece::Lit("  }\n"));
        }
        if !mg_rest.is_empty() {
            out.push(Piece::Msg {
                ty: "tensorflow.MetaGraphDef",
                parts: mg_rest,
                indent: 2,
            });
        }
        out.push(Piece::Lit("}\n"));
    }
    if !top_rest.is_empty() {
        out.insert(
            0,
            Piece::Msg {
                ty: "tensorflow.SavedModel",
                parts: top_rest,
                indent: 0,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indents_lines() {
        assert_eq!(indent(b"a {\n  b: 1\n}\n", 2), b"  a {\n    b: 1\n  }\n");
    }
}
