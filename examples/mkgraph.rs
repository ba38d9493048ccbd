//! Writes a synthetic SavedModel graph for benchmarks and scale tests:
//! `mkgraph DIR --nodes N [--functions F] [--flat 1]` writes `DIR/saved_model.pb` with one meta
//! graph tagged `serve` holding N graph nodes named `block_<i/1000>/layer_<i/10 % 100>/op_<i % 10>`
//! (with `--flat 1`: `node_<i>`, all in one directory; every tenth node is a small float Const),
//! and F functions of 10 nodes each. No variables.

use prost::Message;
use tfmount::proto::tensor_shape_proto::Dim;
use tfmount::proto::{
    attr_value, AttrValue, FunctionDef, FunctionDefLibrary, GraphDef, MetaGraphDef, NodeDef, OpDef,
    SavedModel, TensorProto, TensorShapeProto,
};

fn node(name: String, op: &str, i: usize) -> NodeDef {
    let mut n = NodeDef {
        name,
        op: op.to_string(),
        device: "/device:CPU:0".into(),
        ..Default::default()
    };
    if op == "Const" {
        let t = TensorProto {
            dtype: 1,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![Dim {
                    size: 4,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            float_val: vec![i as f32],
            ..Default::default()
        };
        n.attr.insert(
            "value".into(),
            AttrValue {
                value: Some(attr_value::Value::Tensor(t)),
            },
        );
    } else if i > 0 {
        n.input.push(format!("in_{}", i - 1));
    }
    n.attr.insert(
        "T".into(),
        AttrValue {
            value: Some(attr_value::Value::Type(1)),
        },
    );
    n
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: mkgraph DIR --nodes N [--functions F] [--flat 1]";
    let dir = args.first().ok_or(usage)?;
    let mut nodes = 1000usize;
    let mut functions = 0usize;
    let mut flat = false;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let v: usize = it.next().ok_or(usage)?.parse()?;
        match a.as_str() {
            "--nodes" => nodes = v,
            "--functions" => functions = v,
            "--flat" => flat = v != 0,
            _ => return Err(usage.into()),
        }
    }
    let graph = GraphDef {
        node: (0..nodes)
            .map(|i| {
                let name = if flat {
                    format!("node_{i:06}")
                } else {
                    format!("block_{}/layer_{}/op_{}", i / 1000, i / 10 % 100, i % 10)
                };
                node(name, if i % 10 == 0 { "Const" } else { "Identity" }, i)
            })
            .collect(),
        library: Some(FunctionDefLibrary {
            function: (0..functions)
                .map(|f| FunctionDef {
                    signature: Some(OpDef {
                        name: format!("__inference_fn_{f}"),
                        ..Default::default()
                    }),
                    node_def: (0..10)
                        .map(|i| node(format!("n{i}"), "Identity", i))
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mg = MetaGraphDef {
        meta_info_def: Some(tfmount::proto::meta_graph_def::MetaInfoDef {
            tags: vec!["serve".into()],
            ..Default::default()
        }),
        graph_def: Some(graph),
        ..Default::default()
    };
    let sm = SavedModel {
        saved_model_schema_version: 1,
        meta_graphs: vec![mg],
    };
    std::fs::create_dir_all(dir)?;
    let bytes = sm.encode_to_vec();
    std::fs::write(std::path::Path::new(dir).join("saved_model.pb"), &bytes)?;
    println!(
        "{dir}/saved_model.pb: {nodes} nodes, {functions} functions, {} bytes",
        bytes.len()
    );
    Ok(())
}
