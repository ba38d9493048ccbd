//! Which tensors of a checkpoint are the model's weights (`weights.safetensors`), and the names
//! they are shown by. A weight is a tensor of the `model` role ([`crate::parse::roles`], the
//! rules `summary.txt` counts by: no optimizer slots or state, no bookkeeping), decided from the
//! key alone, so the same rules serve a TF1 checkpoint, a TF2 object-based one and the Keras
//! formats (`layers/dense/vars/0`, `optimizer/vars/3`, `model_weights/dense/dense/kernel:0`,
//! `optimizer_weights/adam/...`).
//!
//! A weight is shown by the name the checkpoint's `names/` gives its key last (the same
//! `(name, key)` pairs: for a TF2 checkpoint the object path comes first and the variable's own
//! name, `seq/hidden/kernel`, last; for a SavedModel the `SavedVariable` name or the variable's
//! own name; for a legacy Keras file its `weight_names`, for a `.keras` the `variable.path`
//! its `config.json` gives), else by its key (TF1, a Keras 3 `.weights.h5`).

use std::collections::HashMap;

use crate::parse::roles::Role;

use crate::error::FsResult;
use crate::formats::names;
use crate::formats::tensors::{walk, TensorSet};

/// Whether the tensor at `key` is one of the model's weights.
pub(crate) fn is_weight(key: &[u8]) -> bool {
    Role::of(key) == Role::Model
}

/// The model's weights among `keys` (in their order): `(shown name, key)`, the shown name the
/// last name `names` (`names/`'s `(name, key)` pairs) gives the key, else the key itself (a key that is not UTF-8: its lossy text; `weights.safetensors` leaves
/// such a tensor out and names it by its bytes). Shown names are unique ([`names::uniquify`]).
pub(crate) fn model_weights(
    keys: impl Iterator<Item = Vec<u8>>,
    names: &[(String, String)],
) -> Vec<(String, Vec<u8>)> {
    let mut by_key: HashMap<&[u8], &str> = HashMap::new();
    for (n, k) in names {
        by_key.insert(k.as_bytes(), n);
    }
    let mut shown = Vec::new();
    let mut raw = Vec::new();
    for key in keys.filter(|k| is_weight(k)) {
        let name = match by_key.get(&key[..]) {
            Some(n) => n.to_string(),
            None => String::from_utf8_lossy(&key).into_owned(),
        };
        shown.push((name, String::new()));
        raw.push(key);
    }
    // Unique names; uniquify keeps every name that is already unique.
    names::uniquify(shown)
        .into_iter()
        .map(|(n, _)| n)
        .zip(raw)
        .collect()
}

/// [`model_weights`] of a whole set, named by `names` (its `names/` pairs), leaving out
/// `aliases` (keys holding a weight another key holds: [`names::Names::aliases`]): `(shown name,
/// key, position in the set)`, in key order. One pass over the index.
pub(crate) fn of_set(
    set: &dyn TensorSet,
    names: &[(String, String)],
    aliases: &[String],
) -> FsResult<Vec<(String, Vec<u8>, u64)>> {
    let aliases: std::collections::HashSet<&[u8]> = aliases.iter().map(|a| a.as_bytes()).collect();
    let mut keys = Vec::new();
    let mut pos = Vec::new();
    walk(set, |p, k| {
        if is_weight(k) && !aliases.contains(k) {
            keys.push(k.to_vec());
            pos.push(p);
        }
        Ok(true)
    })?;
    // model_weights keeps every key given (all are weights), in order.
    Ok(model_weights(keys.into_iter(), names)
        .into_iter()
        .zip(pos)
        .map(|((n, k), p)| (n, k, p))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_by_key() {
        for k in [
            "dense/kernel",
            "dense/bias",
            "step",
            "net/kernel/.ATTRIBUTES/VARIABLE_VALUE",
            "optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE",
            "layers/dense/vars/0",
            "model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE",
            "Adam",
            "counter/save_counter2",
        ] {
            assert!(is_weight(k.as_bytes()), "{k}");
        }
        for k in [
            "_CHECKPOINTABLE_OBJECT_GRAPH",
            "global_step",
            "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
            "dense/kernel/Adam",
            "dense/kernel/Adam_1",
            "beta1_power",
            "opt/beta2_power/.ATTRIBUTES/VARIABLE_VALUE",
            "net/kernel/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
            "optimizer/_variables/2/.ATTRIBUTES/VARIABLE_VALUE",
            "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE",
            "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
            "optimizer/vars/3",
        ] {
            assert!(!is_weight(k.as_bytes()), "{k}");
        }
    }

    /// Keras' own layouts: a Keras 3 weights file (`.weights.h5`, the `model.weights.h5` of a
    /// `.keras`) and a legacy `.h5` (Keras 3's `Model.save("x.h5")`, Keras 2's
    /// `save_weights("x.h5")`), keys as `tests/fixtures/keras` has them.
    #[test]
    fn keras_weights_by_key() {
        for k in [
            "layers/dense/vars/0",
            "layers/dense_1/vars/1",
            "layers/lstm/cell/vars/2",
            "layers/multi_head_attention/key_dense/vars/0",
            "layers/batch_normalization/vars/3",
            "model_weights/dense/dense/kernel:0",
            "model_weights/lstm/lstm/lstm_cell/recurrent_kernel",
            "model_weights/batch_norm/batch_norm/moving_variance",
            "dense/dense/kernel:0",
            // A layer of the user's own named like an optimizer's group.
            "layers/optimizer/vars/0",
            "model_weights/optimizer/optimizer/kernel",
        ] {
            assert!(is_weight(k.as_bytes()), "{k}");
        }
        for k in [
            "optimizer/vars/0",
            "optimizer/vars/1",
            "optimizer/vars/47",
            "optimizer_weights/adam/conv_kernel_momentum",
            "optimizer_weights/adam/iteration",
            "optimizer_weights/iteration:0",
            "optimizer_weights/Adam/dense/kernel/m:0",
        ] {
            assert!(!is_weight(k.as_bytes()), "{k}");
        }
    }

    #[test]
    fn shown_names_are_the_last_names_else_keys_and_unique() {
        let keys = [
            "a/.ATTRIBUTES/VARIABLE_VALUE",
            "b/.ATTRIBUTES/VARIABLE_VALUE",
            "c",
            "d/.ATTRIBUTES/VARIABLE_VALUE",
            "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE",
        ];
        // As names/ lists them: object paths first, then the variables' own names.
        let names = vec![
            ("a".to_string(), keys[0].to_string()),
            ("b".to_string(), keys[1].to_string()),
            ("optimizer/iter".to_string(), keys[4].to_string()),
            ("w".to_string(), keys[0].to_string()),
            ("c".to_string(), keys[1].to_string()),
            ("it".to_string(), keys[4].to_string()),
        ];
        let got = model_weights(keys.iter().map(|k| k.as_bytes().to_vec()), &names);
        let got: Vec<(&str, &[u8])> = got.iter().map(|(n, k)| (&n[..], &k[..])).collect();
        assert_eq!(
            got,
            vec![
                ("w", keys[0].as_bytes()),
                ("c", keys[1].as_bytes()),
                // The key `c` is taken by the variable name of `b`.
                ("c_1", keys[2].as_bytes()),
                ("d/.ATTRIBUTES/VARIABLE_VALUE", keys[3].as_bytes()),
            ]
        );
    }

    #[test]
    fn keras_keys_without_names_are_shown_as_keys() {
        let keys = [
            "layers/dense/vars/0",
            "layers/dense/vars/1",
            "optimizer/vars/0",
        ];
        let got = model_weights(keys.iter().map(|k| k.as_bytes().to_vec()), &[]);
        let got: Vec<(&str, &[u8])> = got.iter().map(|(n, k)| (&n[..], &k[..])).collect();
        assert_eq!(
            got,
            vec![
                ("layers/dense/vars/0", keys[0].as_bytes()),
                ("layers/dense/vars/1", keys[1].as_bytes()),
            ]
        );
    }
}
