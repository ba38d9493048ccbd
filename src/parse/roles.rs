//! What a tensor is for, from its key alone (`summary.txt`'s roles, `weights.safetensors`'s
//! weights): the naming conventions of TensorFlow's and Keras's writers, so the same rules serve
//! a TF1 checkpoint, a TF2 object-based one and the Keras formats.
//!
//! - optimizer slots (state kept per model variable: Adam's momentum and velocity, ...): a TF2
//!   key holding `/.OPTIMIZER_SLOT/`, a Keras 3 optimizer's `optimizer/_variables/...` in a TF
//!   checkpoint; a TF1 slot, i.e. a key with a `/` whose last component is a TF1 optimizer's slot
//!   name (`Adam`, `Momentum`, `RMSProp`, `Adagrad`, `AdagradDA`, `ProximalAdagrad`, `Ftrl`,
//!   `Adadelta`, `Adamax`, `Nadam`, `LazyAdam`), optionally followed by `_<digits>`
//!   (`dense/kernel/Adam_1`); a Keras 3 weights file's (`.weights.h5`, `.keras`)
//!   `optimizer/vars/N` from N = 2 on; a legacy Keras `.h5`'s `optimizer_weights/...` other than
//!   the optimizer's own below (Keras 3's `adam/dense_kernel_momentum`, Keras 2's
//!   `Adam/dense/kernel/m:0`, older Keras' `training/Adam/Variable_1:0`);
//! - other optimizer state: a last component `beta1_power` or `beta2_power` (optionally
//!   `_<digits>`); a key under `optimizer/` in a TF checkpoint (TF2 Keras' iteration count and
//!   learning rate), except `optimizer/_trainable_variables/...`, through which Keras 3 reaches
//!   the model's own variables first; a Keras 3 weights file's `optimizer/vars/0` (the iteration
//!   count) and `optimizer/vars/1` (the learning rate: Keras stores it there when it is a number;
//!   with a schedule `vars/1` is the first slot, which [`Role::of_tensor`] tells by its shape); a
//!   legacy `.h5`'s `optimizer_weights/<optimizer>/<name>` whose `<name>` (without `:<digits>`)
//!   is one of the optimizer's own variables (`iteration`, `iterations`, `iter`,
//!   `learning_rate`, `lr`, `decay`, `m_schedule`, `u_product`, and a loss-scale optimizer's
//!   `dynamic_scale`, `step_counter`, `current_loss_scale`, `good_steps`);
//! - bookkeeping: `global_step`, `save_counter` (by TF2 object path or TF1 key), the object
//!   graph `_CHECKPOINTABLE_OBJECT_GRAPH`;
//! - in an Orbax checkpoint, by its first component or the one after the item's name: Keras's
//!   `optimizer_variables/...` and a Flax `TrainState`'s `opt_state/...` are optimizer slots,
//!   except a last component `iteration`, `iterations`, `learning_rate` or `count` (the
//!   optimizer's own); Keras's `metrics_variables/...` are bookkeeping;
//! - the model: everything else, also a counter of the user's own (`step`): only what TensorFlow
//!   and Keras write themselves is recognized.

/// What a tensor is for (see the module doc for the rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Model,
    OptimizerSlot,
    OptimizerOther,
    Bookkeeping,
}

impl Role {
    pub(crate) const ALL: [Role; 4] = [
        Role::Model,
        Role::OptimizerSlot,
        Role::OptimizerOther,
        Role::Bookkeeping,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Model => "model",
            Role::OptimizerSlot => "optimizer slots",
            Role::OptimizerOther => "optimizer other",
            Role::Bookkeeping => "bookkeeping",
        }
    }

    /// The role of the tensor named `key`.
    pub(crate) fn of(key: &[u8]) -> Role {
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
        // A Keras 3 weights file's optimizer: `vars/0` is the iteration count, `vars/1` the
        // learning rate (when it is a number), the rest its slots.
        if let Some(n) = key.strip_prefix(b"optimizer/vars/") {
            return match n {
                b"0" | b"1" => Role::OptimizerOther,
                _ => Role::OptimizerSlot,
            };
        }
        // A legacy `.h5`'s optimizer: its own variables by name, the rest its slots.
        if let Some(rest) = key.strip_prefix(b"optimizer_weights/") {
            const OWN: &[&[u8]] = &[
                b"iteration",
                b"iterations",
                b"iter",
                b"learning_rate",
                b"lr",
                b"decay",
                b"m_schedule",
                b"u_product",
                b"dynamic_scale",
                b"step_counter",
                b"current_loss_scale",
                b"good_steps",
            ];
            let leaf = match rest.iter().rposition(|&b| b == b'/') {
                Some(i) => &rest[i + 1..],
                None => rest,
            };
            let leaf = match leaf.iter().rposition(|&b| b == b':') {
                Some(i) if leaf[i + 1..].iter().all(u8::is_ascii_digit) => &leaf[..i],
                _ => leaf,
            };
            return if OWN.contains(&leaf) {
                Role::OptimizerOther
            } else {
                Role::OptimizerSlot
            };
        }
        // A TF checkpoint's Keras optimizer (whose `_trainable_variables` are the model's own,
        // reached first through it): its iteration count, learning rate.
        if key.starts_with(b"optimizer/") && !key.starts_with(b"optimizer/_trainable_variables/") {
            return Role::OptimizerOther;
        }
        if let Some(r) = orbax_role(key) {
            return r;
        }
        Role::Model
    }

    /// The role of the tensor named `key` of shape `shape`: [`Role::of`], except that a Keras 3
    /// weights file's `optimizer/vars/1` that is not a scalar is a slot (its optimizer had a
    /// learning-rate schedule, which Keras does not store, so the slots start at `vars/1`).
    pub(crate) fn of_tensor(key: &[u8], shape: &[u64]) -> Role {
        if key == b"optimizer/vars/1" && !shape.is_empty() {
            return Role::OptimizerSlot;
        }
        Role::of(key)
    }
}

/// An Orbax checkpoint's state, by its first component or the one after the item's name
/// (`default/`, `pytree/`): Keras's `OrbaxCheckpoint` (`optimizer_variables/...`, its
/// `iteration` and `learning_rate` the optimizer's own; `metrics_variables/...`) and a Flax
/// `TrainState`'s optax state (`opt_state/...`, its `count` and `learning_rate` the
/// optimizer's own).
fn orbax_role(key: &[u8]) -> Option<Role> {
    let mut parts = key.split(|&b| b == b'/');
    let first = parts.next()?;
    let second = parts.next();
    let last = key.rsplit(|&b| b == b'/').next()?;
    let at = |name: &[u8]| first == name || second == Some(name);
    let own = matches!(
        last,
        b"iteration" | b"iterations" | b"learning_rate" | b"count"
    );
    if at(b"optimizer_variables") || at(b"opt_state") {
        return Some(if own {
            Role::OptimizerOther
        } else {
            Role::OptimizerSlot
        });
    }
    at(b"metrics_variables").then_some(Role::Bookkeeping)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orbax_state_by_its_first_components() {
        // Keras's OrbaxCheckpoint (item `pytree`), and a Flax TrainState (item `default`, or
        // saved alone).
        for (key, role) in [
            (
                "pytree/trainable_variables/sequential/hidden/kernel",
                Role::Model,
            ),
            ("pytree/non_trainable_variables/bn/moving_mean", Role::Model),
            (
                "pytree/optimizer_variables/adam/sequential_hidden_kernel_momentum",
                Role::OptimizerSlot,
            ),
            (
                "pytree/optimizer_variables/adam/iteration",
                Role::OptimizerOther,
            ),
            (
                "pytree/optimizer_variables/adam/learning_rate",
                Role::OptimizerOther,
            ),
            ("pytree/metrics_variables/loss/total", Role::Bookkeeping),
            ("default/params/dense/kernel", Role::Model),
            ("default/opt_state/mu/dense/kernel", Role::OptimizerSlot),
            ("opt_state/count", Role::OptimizerOther),
            ("step", Role::Model),
            // Deeper than the item's name: a user's own names.
            ("params/blocks/opt_state/w", Role::Model),
        ] {
            assert_eq!(Role::of(key.as_bytes()), role, "{key}");
        }
    }
}
