//! Compiles our `.proto` files with a pure-Rust compiler (protox), so no system `protoc` is needed.
//! The descriptor set is also kept for prost-reflect (protobuf text format).
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/tensorflow/types.proto",
        "proto/tensorflow/tensor_shape.proto",
        "proto/tensorflow/tensor_slice.proto",
        "proto/tensorflow/versions.proto",
        "proto/tensorflow/tensor_bundle.proto",
        "proto/tensorflow/checkpoint_state.proto",
        "proto/tensorflow/graph_debug_info.proto",
        "proto/tensorflow/graph.proto",
        "proto/tensorflow/struct.proto",
        "proto/tensorflow/saved_object_graph.proto",
        "proto/tensorflow/meta_graph.proto",
    ];
    for p in &protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("file_descriptor_set.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    // BTreeMap for map fields: deterministic encoding (tests compare re-encoded messages).
    prost_build::Config::new()
        .btree_map(["."])
        .compile_fds(fds)?;
    Ok(())
}
