//! An Orbax item's `_METADATA`: the pytree it saved (`tree_metadata`, one entry per leaf, each
//! with its path as `key_metadata` and what it was as `value_metadata.value_type`) and how its
//! arrays are stored (`use_ocdbt`, `use_zarr3`, `store_array_data_equal_to_fill_value`). Pure over
//! the JSON bytes.
//!
//! A leaf's path is its keys in order: dict keys (`key_type` 2) and sequence indices (1). Orbax
//! stores the array of a leaf under the keys joined by `.` (`params.dense.kernel`), and tfmount
//! shows it at the keys joined by `/` (`params/dense/kernel`). Empty containers (`Dict`, `List`,
//! `None` leaves) hold nothing and are not tensors.

use crate::parse::FormatError;

fn bad(m: impl Into<String>) -> FormatError {
    FormatError::Format(format!("Orbax _METADATA: {}", m.into()))
}

/// What a leaf holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A zarr array in the item's store (`np.ndarray`, `jax.Array`, and Python scalars, which
    /// Orbax stores as 0-d arrays).
    Array,
    /// A Python string, kept in the item's `_strings.json`.
    String,
}

/// One leaf of the saved pytree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Leaf {
    /// Its keys, in order.
    pub(crate) path: Vec<String>,
    pub(crate) kind: Kind,
}

impl Leaf {
    /// The name Orbax stores it under (`params.dense.kernel`).
    pub(crate) fn stored_name(&self) -> String {
        self.path.join(".")
    }
    /// The path tfmount shows it at (`params/dense/kernel`).
    pub(crate) fn shown(&self) -> String {
        self.path.join("/")
    }
}

/// An item's `_METADATA`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TreeMeta {
    pub(crate) leaves: Vec<Leaf>,
    /// Arrays are stored in an OCDBT database (else one directory per array); `None`: not said.
    pub(crate) use_ocdbt: Option<bool>,
    /// Arrays are zarr v3 (`zarr.json`), as Orbax's v1 API writes them (else v2, `.zarray`).
    pub(crate) use_zarr3: bool,
    /// Every chunk was written, also those equal to the fill value: a missing chunk is damage,
    /// not zeros.
    pub(crate) all_chunks_stored: bool,
}

/// Whether `json` is an Orbax pytree `_METADATA` (an object with `tree_metadata`), without
/// parsing the leaves.
pub(crate) fn looks_like(json: &[u8]) -> bool {
    let head = &json[..json.len().min(64)];
    let t = String::from_utf8_lossy(head);
    t.trim_start().starts_with('{') && t.contains("\"tree_metadata\"")
}

/// Parses an item's `_METADATA`.
pub(crate) fn parse(json: &[u8]) -> Result<TreeMeta, FormatError> {
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| bad(format!("not JSON: {e}")))?;
    let tree = v
        .get("tree_metadata")
        .and_then(|t| t.as_object())
        .ok_or_else(|| bad("no tree_metadata object"))?;
    let mut leaves = Vec::with_capacity(tree.len());
    for (name, entry) in tree {
        let keys = entry
            .get("key_metadata")
            .and_then(|k| k.as_array())
            .ok_or_else(|| bad(format!("leaf {name}: no key_metadata list")))?;
        let mut path = Vec::with_capacity(keys.len());
        for k in keys {
            let key = match k.get("key") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Number(n)) => n.to_string(),
                _ => {
                    return Err(bad(format!(
                        "leaf {name}: a key that is not a name or index"
                    )))
                }
            };
            if key.is_empty() || key == "." || key == ".." || key.contains(['/', '\0']) {
                return Err(bad(format!(
                    "leaf {name}: key {key:?} cannot be a file name"
                )));
            }
            path.push(key);
        }
        if path.is_empty() {
            return Err(bad(format!("leaf {name}: an empty path")));
        }
        let ty = entry
            .get("value_metadata")
            .and_then(|m| m.get("value_type"))
            .and_then(|t| t.as_str())
            .ok_or_else(|| bad(format!("leaf {name}: no value_metadata.value_type")))?;
        let kind = match ty {
            "np.ndarray" | "jax.Array" | "scalar" => Kind::Array,
            "string" => Kind::String,
            // Empty containers and None: nothing stored.
            "Dict" | "List" | "Tuple" | "None" | "NamedTuple" => continue,
            other => {
                return Err(bad(format!(
                    "leaf {name}: value type {other:?} is not one tfmount reads"
                )))
            }
        };
        leaves.push(Leaf { path, kind });
    }
    leaves.sort_by_cached_key(Leaf::shown);
    if let Some(w) = leaves.windows(2).find(|w| w[0].shown() == w[1].shown()) {
        return Err(bad(format!("two leaves at {}", w[0].shown())));
    }
    Ok(TreeMeta {
        leaves,
        use_ocdbt: v.get("use_ocdbt").and_then(|b| b.as_bool()),
        use_zarr3: v
            .get("use_zarr3")
            .and_then(|b| b.as_bool())
            .unwrap_or(false),
        all_chunks_stored: v
            .get("store_array_data_equal_to_fill_value")
            .and_then(|b| b.as_bool())
            .unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(rel: &str) -> Vec<u8> {
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/orbax")
                .join(rel),
        )
        .expect("fixture")
    }

    #[test]
    fn the_leaves_orbax_restored_are_the_leaves_of_its_metadata() {
        let m = parse(&fixture("ocdbt/ckpt/_METADATA")).expect("parse");
        let shown: Vec<String> = m.leaves.iter().map(Leaf::shown).collect();
        let want: serde_json::Value =
            serde_json::from_slice(&fixture("expected/ocdbt.json")).expect("json");
        let want: Vec<&str> = want["leaves"]
            .as_array()
            .expect("leaves")
            .iter()
            .map(|l| l["key"].as_str().expect("key"))
            .collect();
        assert_eq!(shown, want);
        assert_eq!(m.use_ocdbt, Some(true));
        assert!(m.all_chunks_stored);
        let keras = parse(&fixture("keras/orbax/1/model_config/_METADATA")).expect("parse");
        assert_eq!(
            keras.leaves,
            vec![Leaf {
                path: vec!["config".into()],
                kind: Kind::String
            }]
        );
    }

    #[test]
    fn hostile_metadata_is_an_error() {
        let good = fixture("ocdbt/ckpt/_METADATA");
        for cut in 0..good.len() {
            let _ = parse(&good[..cut]);
        }
        for bad in [
            r#"{}"#,
            r#"{"tree_metadata": []}"#,
            r#"{"tree_metadata": {"a": {"key_metadata": [{"key": "../x"}], "value_metadata": {"value_type": "scalar"}}}}"#,
            r#"{"tree_metadata": {"a": {"key_metadata": [], "value_metadata": {"value_type": "scalar"}}}}"#,
            r#"{"tree_metadata": {"a": {"key_metadata": [{"key": "x"}], "value_metadata": {"value_type": "pickle"}}}}"#,
            r#"{"tree_metadata": {"a": {"key_metadata": [{"key": "x"}], "value_metadata": {"value_type": "scalar"}}, "b": {"key_metadata": [{"key": "x"}], "value_metadata": {"value_type": "scalar"}}}}"#,
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
