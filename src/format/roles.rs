//! What a tensor is for, from its key alone (`summary.txt`'s roles, `weights.safetensors`'s
//! weights): the naming conventions of TensorFlow's and Keras's writers, so the same rules serve
//! a TF1 checkpoint, a TF2 object-based one and the Keras formats.
//!
//! - optimizer slots: a TF2 key holding `/.OPTIMIZER_SLOT/`, a Keras optimizer's
//!   `optimizer/_variables/...`; a TF1 slot, i.e. a key with a `/` whose last component is a TF1
//!   optimizer's slot name (`Adam`, `Momentum`, `RMSProp`, `Adagrad`, `AdagradDA`,
//!   `ProximalAdagrad`, `Ftrl`, `Adadelta`, `Adamax`, `Nadam`, `LazyAdam`), optionally followed
//!   by `_<digits>` (`dense/kernel/Adam_1`);
//! - other optimizer state: a last component `beta1_power` or `beta2_power` (optionally
//!   `_<digits>`); a key under `optimizer/` (TF2 Keras' iteration count and learning rate; a
//!   Keras 3 weights file's `optimizer/vars/N`), except `optimizer/_trainable_variables/...`,
//!   through which Keras 3 reaches the model's own variables first in a TF checkpoint; a key
//!   under `optimizer_weights/` (legacy Keras `.h5`);
//! - bookkeeping: `global_step`, `save_counter` (by TF2 object path or TF1 key), the object
//!   graph `_CHECKPOINTABLE_OBJECT_GRAPH`;
//! - the model: everything else, also a counter of the user's own (`step`): only what TensorFlow
//!   and Keras write themselves is recognized.

/// What a tensor is for (see the module doc for the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Model,
    OptimizerSlot,
    OptimizerOther,
    Bookkeeping,
}

impl Role {
    pub const ALL: [Role; 4] = [
        Role::Model,
        Role::OptimizerSlot,
        Role::OptimizerOther,
        Role::Bookkeeping,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::Model => "model",
            Role::OptimizerSlot => "optimizer slots",
            Role::OptimizerOther => "optimizer other",
            Role::Bookkeeping => "bookkeeping",
        }
    }

    /// The role of the tensor named `key`.
    pub fn of(key: &[u8]) -> Role {
        const TF1_SLOTS: &[&[u8]] = &[
            b"Adam",
            b"Momentum",
            b"RMSProp",
            b"Adagrad",
            b"AdagradDA",
            b"ProximalAdagrad",
            b"Ftrl",
            b"Adadelta",
            b"Adamax",
            b"Nadam",
            b"LazyAdam",
        ];
        const OPTIMIZER_OWN: &[&[u8]] = &[b"beta1_power", b"beta2_power"];
        if key == b"_CHECKPOINTABLE_OBJECT_GRAPH" {
            return Role::Bookkeeping;
        }
        if find(key, b"/.OPTIMIZER_SLOT/").is_some() || key.starts_with(b"optimizer/_variables/") {
            return Role::OptimizerSlot;
        }
        let object_path = match find(key, b"/.ATTRIBUTES/") {
            Some(i) => &key[..i],
            None => key,
        };
        // By object path (TF2) or key (TF1): `global_step`, `save_counter`.
        if matches!(object_path, b"global_step" | b"save_counter") {
            return Role::Bookkeeping;
        }
        let (parent, last) = match object_path.iter().rposition(|&b| b == b'/') {
            Some(i) => (Some(&object_path[..i]), &object_path[i + 1..]),
            None => (None, object_path),
        };
        let is = |names: &[&[u8]]| {
            let base = strip_digits_suffix(last);
            names.contains(&base)
        };
        if parent.is_some() && is(TF1_SLOTS) {
            return Role::OptimizerSlot;
        }
        if is(OPTIMIZER_OWN) {
            return Role::OptimizerOther;
        }
        // Keras: a TF checkpoint's optimizer (whose `_trainable_variables` are the model's own,
        // reached first through it), a Keras 3 file's `optimizer/vars/N`, a legacy `.h5`'s
        // `optimizer_weights/`.
        if key.starts_with(b"optimizer/") && !key.starts_with(b"optimizer/_trainable_variables/")
            || key.starts_with(b"optimizer_weights/")
        {
            return Role::OptimizerOther;
        }
        Role::Model
    }
}

/// `name` without a `_<digits>` suffix.
fn strip_digits_suffix(name: &[u8]) -> &[u8] {
    match name.iter().rposition(|&b| b == b'_') {
        Some(i) if i + 1 < name.len() && name[i + 1..].iter().all(u8::is_ascii_digit) => &name[..i],
        _ => name,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}
