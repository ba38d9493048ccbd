//! The descriptors of the crate's protobuf messages (built into the binary by `build.rs`), for
//! reading and printing messages by name: state files, graph files, TF.js JSON, text renderings.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/file_descriptor_set.bin"));

/// The built-in descriptors, decoded once (a cheap clone afterwards).
pub(crate) fn descriptor_pool() -> Result<DescriptorPool, String> {
    static POOL: OnceLock<Result<DescriptorPool, String>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(DESCRIPTORS).map_err(|e| e.to_string()))
        .clone()
}

fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // The descriptor set is built into the binary by build.rs; failing to decode it is a
        // build defect, caught by every test.
        let pool = descriptor_pool().unwrap_or_else(|e| panic!("built-in descriptors: {e}"));
        // Map fields are declared here as the repeated entry messages they are on the wire:
        // prost-reflect keeps a decoded map in a HashMap and prints it in that map's random
        // order, so each rendering of a message with a map field (NodeDef attr, signatures,
        // functions) could differ, and a file rendered again for a later read changed under
        // its reader. As repeated entries they keep the file's order; the text syntax is the
        // same (`attr { key: ... value { ... } }`).
        let mut file: Vec<_> = pool.file_descriptor_protos().cloned().collect();
        fn unmap(m: &mut prost_types::DescriptorProto) {
            if let Some(o) = m.options.as_mut() {
                o.map_entry = None;
            }
            m.nested_type.iter_mut().for_each(unmap);
        }
        file.iter_mut()
            .flat_map(|f| f.message_type.iter_mut())
            .for_each(unmap);
        DescriptorPool::from_file_descriptor_set(prost_types::FileDescriptorSet { file })
            .unwrap_or_else(|e| panic!("built-in descriptors without map entries: {e}"))
    })
}

/// The descriptor of message type `name` (`tensorflow.GraphDef`), from the descriptors build.rs
/// compiled into the binary; `None` for a type they do not hold.
pub fn descriptor(name: &str) -> Option<MessageDescriptor> {
    pool().get_message_by_name(name)
}

/// The name of value `v` of enum `enum_name`, or the number when it has none.
pub(crate) fn enum_value_name(enum_name: &str, v: i32) -> String {
    pool()
        .get_enum_by_name(enum_name)
        .and_then(|e| e.get_value(v))
        .map_or_else(|| v.to_string(), |x| x.name().to_string())
}
