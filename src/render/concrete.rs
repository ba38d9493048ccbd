//! The `Concrete Functions:` section of `saved_model_cli show --all`
//! (`saved_model_cli._show_defined_functions`), from a meta graph's SavedObjectGraph alone.
//!
//! TensorFlow loads the model and lists the root object's children that are functions
//! (`SavedFunction`) or bare concrete functions, sorted by name; for each, its concrete
//! functions (`Option #n`) with their structured input signatures (`Argument #n`,
//! `Named Argument #n`). Where TensorFlow's load would fail on what is read here (a meta graph
//! among several, an undecodable signature, a concrete function missing from the library, a
//! bad node id), it prints `N/A (could not be listed due to unknown reasons)`, and so does this.
//!
//! Not reproducible from the file: the order of several options of one function (TensorFlow
//! sorts them by names it gives the functions while loading, from a process-wide counter: here
//! they are sorted by their saved names, the trailing number compared as a number), and the
//! order of a dict's entries and of several named arguments (the protobuf runtime's hash order:
//! here the saved order, sorted by key).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write;

use prost::Message;

use crate::graph::{GraphFile, GraphKind};
use crate::proto::saved_object::Kind;
use crate::proto::{SavedObjectGraph, StructuredValue};
use crate::render::structured::{self, iterate, repr, str_of, truthy, type_name, Py};

const NA: &str = " N/A (could not be listed due to unknown reasons)\n";

/// `\nConcrete Functions:` and its listing, when meta graph `mg` has an object graph.
pub(crate) fn section(file: &GraphFile, mg: usize) -> Option<String> {
    let m = file.metas.get(mg)?;
    if m.object_graph_def.is_empty() {
        return None;
    }
    let mut out = String::from("\nConcrete Functions:");
    // TensorFlow loads a TF2 SavedModel only when it has exactly one meta graph.
    let single = file.kind != GraphKind::SavedModel || file.metas.len() == 1;
    match single.then(|| listing(file, mg)) {
        Some(Ok(s)) => out.push_str(&s),
        _ => out.push_str(NA),
    }
    Some(out)
}

/// The function listing, or `Err` where TensorFlow's load would fail.
fn listing(file: &GraphFile, mg: usize) -> Result<String, String> {
    let m = file.metas.get(mg).ok_or("no such meta graph")?;
    let buf = file.bytes();
    let mut og_bytes = Vec::new();
    for f in &m.object_graph_def {
        og_bytes.extend_from_slice(buf.get(f.payload_range()).ok_or("range outside the file")?);
    }
    let og = SavedObjectGraph::decode(og_bytes.as_slice()).map_err(|e| e.to_string())?;
    let index = m.index(buf)?;
    let library: HashSet<&[u8]> = index
        .functions
        .items
        .iter()
        .map(|it| it.name(buf))
        .collect();
    render(&og, &library)
}

/// The listing of `og`, whose meta graph's function library holds the functions `library`.
pub(crate) fn render(og: &SavedObjectGraph, library: &HashSet<&[u8]>) -> Result<String, String> {
    // The loader decodes both signatures of every library function the object graph describes.
    let empty = StructuredValue::default();
    let mut inputs: HashMap<&str, Py> = HashMap::new();
    for (name, cf) in &og.concrete_functions {
        if !library.contains(name.as_bytes()) {
            continue;
        }
        let sig = cf.canonicalized_input_signature.as_ref().unwrap_or(&empty);
        let input = structured::decode(sig).map_err(|e| format!("{name}: {e}"))?;
        structured::decode(cf.output_signature.as_ref().unwrap_or(&empty))
            .map_err(|e| format!("{name}: {e}"))?;
        inputs.insert(name, input);
    }
    // Every function object's concrete functions must be in the library; a bare concrete
    // function gives its function the argument keywords used when there is no signature.
    let mut arg_keywords: HashMap<&str, &[String]> = HashMap::new();
    for node in &og.nodes {
        match &node.kind {
            Some(Kind::Function(f)) => {
                if let Some(n) = f
                    .concrete_functions
                    .iter()
                    .find(|n| !library.contains(n.as_bytes()))
                {
                    return Err(format!("no function {n} in the library"));
                }
            }
            Some(Kind::BareConcreteFunction(b)) => {
                if !library.contains(b.concrete_function_name.as_bytes()) {
                    return Err(format!(
                        "no function {} in the library",
                        b.concrete_function_name
                    ));
                }
                arg_keywords.insert(&b.concrete_function_name, &b.argument_keywords);
            }
            _ => {}
        }
    }
    let root = og.nodes.first().ok_or("an object graph without nodes")?;
    // The root's attributes by name (a later child of the same name replaces an earlier one).
    let mut children: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &root.children {
        let id = usize::try_from(c.node_id)
            .ok()
            .filter(|&i| i < og.nodes.len())
            .ok_or_else(|| format!("child node id {} out of range", c.node_id))?;
        children.insert(&c.local_name, id);
    }
    let mut out = String::new();
    for (name, id) in children {
        let mut fns: Vec<&str> = match og.nodes.get(id).and_then(|n| n.kind.as_ref()) {
            Some(Kind::Function(f)) => f.concrete_functions.iter().map(|s| s.as_str()).collect(),
            Some(Kind::BareConcreteFunction(b)) => vec![b.concrete_function_name.as_str()],
            _ => continue,
        };
        let _ = writeln!(out, "\n  Function Name: '{name}'");
        fns.sort_by_key(|f| load_order_key(f));
        for (i, f) in fns.iter().enumerate() {
            option(
                &mut out,
                i + 1,
                inputs.get(f),
                arg_keywords.get(f).copied().unwrap_or(&[]),
            );
        }
    }
    Ok(out)
}

/// A loaded concrete function is named `__inference_<saved name less its __inference_ prefix
/// and _N suffix>_<new number>`; TensorFlow sorts by that name.
fn load_order_key(saved: &str) -> (String, u128, &str) {
    let core = saved.strip_prefix("__inference_").and_then(|s| {
        let (stem, n) = s.rsplit_once('_')?;
        (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some((stem, n))
    });
    match core {
        Some((stem, n)) => (format!("{stem}_"), n.parse().unwrap_or(u128::MAX), saved),
        None => (format!("{saved}_"), 0, saved),
    }
}

/// One `Option #index` of a function: its `(args, kwargs)` input signature, or the argument
/// keywords when the signature is empty.
fn option(out: &mut String, index: usize, input: Option<&Py>, keywords: &[String]) {
    let (args, kwargs) = match input {
        Some(sig) if truthy(sig) => match iterate(sig).as_deref() {
            Some([a, k]) => (Some(a.clone()), Some(k.clone())),
            _ => {
                let _ = writeln!(
                    out,
                    "    Option #{index}: <input signature is not (args, kwargs): {}>",
                    str_of(sig)
                );
                return;
            }
        },
        _ if !keywords.is_empty() => (
            Some(Py::List(
                keywords.iter().map(|k| Py::Str(k.clone())).collect(),
            )),
            None,
        ),
        _ => (None, None),
    };
    if let Some(args) = args.filter(truthy) {
        let _ = writeln!(out, "    Option #{index}");
        let _ = writeln!(out, "      Callable with:");
        print_args(out, &args, "Argument");
    }
    if let Some(kwargs) = kwargs.filter(truthy) {
        print_args(out, &kwargs, "Named Argument");
    }
}

/// `str(value)`, quoted when it is a string (`_maybe_add_quotes`; nothing is escaped).
fn maybe_quoted(v: &Py) -> String {
    match v {
        Py::Str(s) => format!("'{s}'"),
        v => str_of(v),
    }
}

/// `saved_model_cli._print_args(arguments, argument_type, indent=4)`. Its iterable branch
/// ends a value list with two backspaces over the last `, ` (`\b\b]`), as printed.
fn print_args(out: &mut String, arguments: &Py, kind: &str) {
    const IN: &str = "        ";
    let Some(items) = iterate(arguments) else {
        let _ = writeln!(out, "{IN}<{} is not iterable>", type_name(arguments));
        return;
    };
    for (i, el) in items.iter().enumerate() {
        let _ = writeln!(out, "{IN}{kind} #{}", i + 1);
        match el {
            Py::Str(s) => {
                let _ = writeln!(out, "{IN}  {s}");
            }
            Py::TensorSpec { name, .. } => {
                let _ = writeln!(
                    out,
                    "{IN}  {}: {}",
                    name.as_deref().unwrap_or("None"),
                    repr(el)
                );
            }
            Py::Dict(fields) => {
                let _ = writeln!(out, "{IN}  DType: dict");
                let _ = write!(out, "{IN}  Value: {{");
                for (k, v) in fields {
                    let _ = write!(out, "'{k}': {}, ", maybe_quoted(v));
                }
                out.push_str("\u{8}\u{8}}\n");
            }
            Py::List(_) | Py::Tuple(_) | Py::NamedTuple { .. } | Py::Shape(Some(_)) => {
                let _ = writeln!(out, "{IN}  DType: {}", type_name(el));
                let _ = write!(out, "{IN}  Value: [");
                for v in iterate(el).unwrap_or_default() {
                    let _ = write!(out, "{}, ", maybe_quoted(&v));
                }
                out.push_str("\u{8}\u{8}]\n");
            }
            _ => {
                let _ = writeln!(out, "{IN}  DType: {}", type_name(el));
                let _ = writeln!(out, "{IN}  Value: {}", str_of(el));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::structured_value::Kind as SV;
    use crate::proto::trackable_object_graph::trackable_object::ObjectReference;
    use crate::proto::{
        DictValue, SavedBareConcreteFunction, SavedConcreteFunction, SavedFunction, SavedObject,
        TensorSpecProto, TupleValue,
    };

    fn sv(k: SV) -> StructuredValue {
        StructuredValue { kind: Some(k) }
    }

    fn tuple(v: Vec<StructuredValue>) -> StructuredValue {
        sv(SV::TupleValue(TupleValue { values: v }))
    }

    fn child(id: i32, name: &str) -> ObjectReference {
        ObjectReference {
            node_id: id,
            local_name: name.into(),
        }
    }

    fn obj(kind: Kind) -> SavedObject {
        SavedObject {
            kind: Some(kind),
            ..Default::default()
        }
    }

    fn graph() -> SavedObjectGraph {
        let spec = sv(SV::TensorSpecValue(TensorSpecProto {
            name: "x".into(),
            shape: None,
            dtype: 1,
        }));
        let mut kw = DictValue::default();
        kw.fields.insert("flag".into(), sv(SV::BoolValue(true)));
        let mut og = SavedObjectGraph {
            nodes: vec![
                SavedObject {
                    children: vec![child(1, "f"), child(2, "bare"), child(3, "v")],
                    ..Default::default()
                },
                obj(Kind::Function(SavedFunction {
                    concrete_functions: vec!["__inference_f_100".into(), "__inference_f_99".into()],
                    function_spec: None,
                })),
                obj(Kind::BareConcreteFunction(SavedBareConcreteFunction {
                    concrete_function_name: "__inference_g_5".into(),
                    argument_keywords: vec!["a".into(), "b".into()],
                    ..Default::default()
                })),
                obj(Kind::UserObject(Default::default())),
            ],
            ..Default::default()
        };
        let none = sv(SV::NoneValue(Default::default()));
        let sig = |args: Vec<StructuredValue>, kwargs: DictValue| SavedConcreteFunction {
            bound_inputs: vec![],
            canonicalized_input_signature: Some(tuple(vec![
                tuple(args),
                sv(SV::DictValue(kwargs)),
            ])),
            output_signature: Some(none.clone()),
        };
        og.concrete_functions.insert(
            "__inference_f_99".into(),
            sig(vec![spec.clone(), sv(SV::Int64Value(2))], kw),
        );
        og.concrete_functions.insert(
            "__inference_f_100".into(),
            sig(
                vec![tuple(vec![spec, sv(SV::StringValue("s".into()))])],
                DictValue::default(),
            ),
        );
        og.concrete_functions.insert(
            "__inference_g_5".into(),
            SavedConcreteFunction {
                bound_inputs: vec![],
                canonicalized_input_signature: Some(none.clone()),
                output_signature: Some(none),
            },
        );
        og
    }

    fn lib() -> HashSet<&'static [u8]> {
        [
            &b"__inference_f_99"[..],
            b"__inference_f_100",
            b"__inference_g_5",
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn lists_like_saved_model_cli() {
        let got = render(&graph(), &lib()).unwrap();
        let want = "\n  Function Name: 'bare'\n    Option #1\n      Callable with:\n        \
            Argument #1\n          a\n        Argument #2\n          b\n\n  \
            Function Name: 'f'\n    Option #1\n      Callable with:\n        Argument #1\n          \
            x: TensorSpec(shape=(), dtype=tf.float32, name='x')\n        Argument #2\n          \
            DType: int\n          Value: 2\n        Named Argument #1\n          flag\n    \
            Option #2\n      Callable with:\n        Argument #1\n          DType: tuple\n          \
            Value: [TensorSpec(shape=(), dtype=tf.float32, name='x'), 's', \u{8}\u{8}]\n";
        assert_eq!(got, want);
    }

    #[test]
    fn load_failures_are_errors() {
        // A concrete function missing from the library.
        assert!(render(&graph(), &[&b"__inference_f_99"[..]].into_iter().collect()).is_err());
        // A child id out of range, negative.
        for id in [-1, 4, i32::MAX] {
            let mut og = graph();
            og.nodes[0].children.push(child(id, "z"));
            assert!(render(&og, &lib()).is_err(), "{id}");
        }
        // An undecodable signature.
        let mut og = graph();
        if let Some(cf) = og.concrete_functions.get_mut("__inference_g_5") {
            cf.output_signature = None;
        }
        assert!(render(&og, &lib()).is_err());
        // No nodes.
        assert!(render(&SavedObjectGraph::default(), &lib()).is_err());
    }

    #[test]
    fn odd_signatures_print_placeholders() {
        let mut og = graph();
        if let Some(cf) = og.concrete_functions.get_mut("__inference_g_5") {
            cf.canonicalized_input_signature = Some(tuple(vec![sv(SV::Int64Value(1))]));
        }
        let got = render(&og, &lib()).unwrap();
        assert!(got.contains("Option #1: <input signature is not (args, kwargs): (1,)>"));
        if let Some(cf) = og.concrete_functions.get_mut("__inference_g_5") {
            cf.canonicalized_input_signature =
                Some(tuple(vec![sv(SV::Int64Value(1)), sv(SV::Int64Value(2))]));
        }
        let got = render(&og, &lib()).unwrap();
        assert!(got.contains("<int is not iterable>"), "{got}");
    }

    #[test]
    fn hostile_object_graphs_never_panic() {
        let bytes = graph().encode_to_vec();
        let library = lib();
        for cut in 0..bytes.len() {
            if let Ok(og) = SavedObjectGraph::decode(&bytes[..cut]) {
                let _ = render(&og, &library);
            }
        }
        for i in 0..bytes.len() {
            for x in [0xffu8, 0x01, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= x;
                if let Ok(og) = SavedObjectGraph::decode(b.as_slice()) {
                    let _ = render(&og, &library);
                }
            }
        }
    }

    #[test]
    fn load_order_sorts_numbers_as_numbers() {
        let mut v = vec![
            "__inference_f_100",
            "__inference_f_99",
            "__inference_a_7",
            "plain",
        ];
        v.sort_by_key(|f| load_order_key(f));
        assert_eq!(
            v,
            [
                "__inference_a_7",
                "__inference_f_99",
                "__inference_f_100",
                "plain"
            ]
        );
    }
}
