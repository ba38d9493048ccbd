//! A Hugging Face sharded checkpoint's index, `model.safetensors.index.json` (transformers'
//! `save_pretrained`, huggingface_hub's `save_torch_state_dict`): `{"metadata": {"total_size":
//! N, ...}, "weight_map": {tensor: shard file}}`, the shards beside it
//! (`model-00001-of-00002.safetensors`). Pure over bytes.

use serde_json::Value;

/// What an index file's name ends with.
pub(crate) const SUFFIX: &str = ".safetensors.index.json";
/// Largest index file read (a model of a million tensors has one of about 100 MB).
pub(crate) const MAX_INDEX: u64 = 256 << 20;

/// A parsed index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Index {
    /// `(tensor, shard file)`, sorted by tensor.
    pub(crate) weight_map: Vec<(String, String)>,
    /// The shard files it names, sorted, each once.
    pub(crate) shards: Vec<String>,
}

/// Whether `name` is an index file's name.
pub(crate) fn is_index_name(name: &str) -> bool {
    name.len() > SUFFIX.len() && name.ends_with(SUFFIX)
}

/// Parses an index file.
pub(crate) fn parse(bytes: &[u8]) -> Result<Index, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let map = v
        .get("weight_map")
        .and_then(Value::as_object)
        .ok_or("no weight_map object (a Hugging Face index maps each tensor to its shard file)")?;
    let mut weight_map = Vec::with_capacity(map.len());
    let mut shards: Vec<String> = Vec::new();
    for (tensor, file) in map {
        let Some(f) = file.as_str() else {
            return Err(format!(
                "weight_map[{tensor:?}] is not a file name ({file})"
            ));
        };
        if f.is_empty() || f.contains('/') || f.contains('\\') || f == "." || f == ".." {
            return Err(format!(
                "weight_map[{tensor:?}] names {f:?}, not a file beside the index"
            ));
        }
        weight_map.push((tensor.clone(), f.to_string()));
        shards.push(f.to_string());
    }
    shards.sort();
    shards.dedup();
    Ok(Index { weight_map, shards })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transformers_layout_parses() {
        let i = parse(
            br#"{"metadata": {"total_size": 48}, "weight_map": {
                "b": "model-00002-of-00002.safetensors",
                "a": "model-00001-of-00002.safetensors",
                "c": "model-00001-of-00002.safetensors"}}"#,
        )
        .expect("parses");
        assert_eq!(
            i.shards,
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
        assert_eq!(i.weight_map.len(), 3);
        assert_eq!(i.weight_map[0].0, "a");
        assert!(is_index_name("model.safetensors.index.json"));
        assert!(!is_index_name(".safetensors.index.json"));
    }

    #[test]
    fn anything_else_is_refused_in_words() {
        for (json, words) in [
            (&br#"{"weight_map": {"a": 3}}"#[..], "not a file name"),
            (
                br#"{"weight_map": {"a": "../x.safetensors"}}"#,
                "not a file beside",
            ),
            (
                br#"{"weight_map": {"a": "/x.safetensors"}}"#,
                "not a file beside",
            ),
            (br#"{"weight_map": ["x"]}"#, "no weight_map object"),
            (br#"{"metadata": {}}"#, "no weight_map object"),
            (br#"{"weight_map""#, "not JSON"),
        ] {
            let e = parse(json).expect_err("refused");
            assert!(e.contains(words), "{e}");
        }
    }
}
