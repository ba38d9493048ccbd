//! Readable names for a Keras 3 file's variables (`names/`), from the model's `config.json`.
//!
//! Keras 3 stores a layer's variables as `layers/<group>/vars/<i>`, where `<group>` is the
//! snake-case name of the layer's *class* (`dense`, `dense_1`, ... in the order of the model's
//! layers), not its name; only the configuration maps them back. For the built-in layers whose
//! variables come in a fixed order ([`LAYERS`]), `names/<layer name>/<variable>` links to the
//! dataset (`names/head/kernel` → `variables/layers/dense_1/vars/0`), with the names Keras
//! gives them (`variable.path`). Every other layer keeps `vars/<i>` as its only name.
//!
//! The optimizer's variables (`optimizer/vars/<i>`) are named as Keras names them
//! (`adam/iteration`, `adam/head_kernel_momentum`) for the optimizers of [`OPTIMIZERS`], when the
//! model's trainable variables can be placed: every layer with variables is in [`LAYERS`], or
//! one layer is not and the number of slots tells how many trainable variables it has.
//!
//! A layer is named only when the file agrees with the table (the group holds exactly the
//! variables the table lists for its configuration); the optimizer only when the number of
//! its variables is what its configuration implies.

use serde_json::Value;

/// A built-in layer's variables in the order Keras saves them (trainable ones first). `when`:
/// the configuration key that must not be `false` for the variable to exist.
struct Var {
    name: &'static str,
    when: Option<&'static str>,
    trainable: bool,
}

const fn v(name: &'static str) -> Var {
    Var {
        name,
        when: None,
        trainable: true,
    }
}

const fn opt(name: &'static str, when: &'static str) -> Var {
    Var {
        name,
        when: Some(when),
        trainable: true,
    }
}

const fn fixed(name: &'static str) -> Var {
    Var {
        name,
        when: None,
        trainable: false,
    }
}

/// What a layer holds: its own variables, or sublayers under attribute names.
enum Holds {
    Vars(&'static [Var]),
    /// `(attribute, the sublayer's name in variable paths, its variables)`; the name `None` is
    /// the RNN cell's, named after its class (`lstm_cell`).
    Sub(&'static [(&'static str, Option<&'static str>, &'static [Var])]),
}

const KERNEL_BIAS: &[Var] = &[v("kernel"), opt("bias", "use_bias")];
const CELL: &[Var] = &[v("kernel"), v("recurrent_kernel"), opt("bias", "use_bias")];

/// The built-in layers named (checked against Keras 3.15: `[v.path for v in layer.weights]`).
const LAYERS: &[(&str, Holds)] = &[
    ("Dense", Holds::Vars(KERNEL_BIAS)),
    (
        "EinsumDense",
        Holds::Vars(&[v("kernel"), opt("bias", "bias_axes")]),
    ),
    ("Conv1D", Holds::Vars(KERNEL_BIAS)),
    ("Conv2D", Holds::Vars(KERNEL_BIAS)),
    ("Conv3D", Holds::Vars(KERNEL_BIAS)),
    ("Conv1DTranspose", Holds::Vars(KERNEL_BIAS)),
    ("Conv2DTranspose", Holds::Vars(KERNEL_BIAS)),
    ("Conv3DTranspose", Holds::Vars(KERNEL_BIAS)),
    ("DepthwiseConv1D", Holds::Vars(KERNEL_BIAS)),
    ("DepthwiseConv2D", Holds::Vars(KERNEL_BIAS)),
    (
        "SeparableConv1D",
        Holds::Vars(&[
            v("depthwise_kernel"),
            v("pointwise_kernel"),
            opt("bias", "use_bias"),
        ]),
    ),
    (
        "SeparableConv2D",
        Holds::Vars(&[
            v("depthwise_kernel"),
            v("pointwise_kernel"),
            opt("bias", "use_bias"),
        ]),
    ),
    ("Embedding", Holds::Vars(&[v("embeddings")])),
    (
        "BatchNormalization",
        Holds::Vars(&[
            opt("gamma", "scale"),
            opt("beta", "center"),
            fixed("moving_mean"),
            fixed("moving_variance"),
        ]),
    ),
    (
        "LayerNormalization",
        Holds::Vars(&[opt("gamma", "scale"), opt("beta", "center")]),
    ),
    (
        "GroupNormalization",
        Holds::Vars(&[opt("gamma", "scale"), opt("beta", "center")]),
    ),
    ("PReLU", Holds::Vars(&[v("alpha")])),
    ("LSTM", Holds::Sub(&[("cell", None, CELL)])),
    ("GRU", Holds::Sub(&[("cell", None, CELL)])),
    ("SimpleRNN", Holds::Sub(&[("cell", None, CELL)])),
    (
        "MultiHeadAttention",
        Holds::Sub(&[
            ("query_dense", Some("query"), KERNEL_BIAS),
            ("key_dense", Some("key"), KERNEL_BIAS),
            ("value_dense", Some("value"), KERNEL_BIAS),
            ("output_dense", Some("attention_output"), KERNEL_BIAS),
        ]),
    ),
];

/// An optimizer's slot variables: sections in order, each interleaving its slots over the
/// trainable variables (`[[momentum, velocity]]`: m and v of the first variable, then of the
/// second, ...). `when`: a configuration key that must be true (or a number above 0).
type Sections = &'static [(&'static [&'static str], Option<&'static str>)];

/// The optimizers named (checked against Keras 3.15: `[v.path for v in optimizer.variables]`).
/// Every one starts with `iteration` and `learning_rate`.
const OPTIMIZERS: &[(&str, Sections)] = &[
    (
        "Adam",
        &[
            (&["momentum", "velocity"], None),
            (&["velocity_hat"], Some("amsgrad")),
        ],
    ),
    (
        "AdamW",
        &[
            (&["momentum", "velocity"], None),
            (&["velocity_hat"], Some("amsgrad")),
        ],
    ),
    ("SGD", &[(&["momentum"], Some("momentum"))]),
    (
        "RMSprop",
        &[
            (&["velocity"], None),
            (&["momentum"], Some("momentum")),
            (&["average_gradient"], Some("centered")),
        ],
    ),
    ("Adagrad", &[(&["accumulator"], None)]),
    ("Adamax", &[(&["momentum", "norm"], None)]),
    (
        "Adadelta",
        &[(&["accumulated_grad", "accumulated_delta_var"], None)],
    ),
    ("Lion", &[(&["momentum"], None)]),
    ("Ftrl", &[(&["accumulator", "linear"], None)]),
];

/// Keras's `naming.to_snake_case`.
pub(crate) fn snake_case(name: &str) -> String {
    let c: Vec<char> = name
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    // `(.)([A-Z][a-z]+)` -> `\1_\2`, left to right, matches not overlapping.
    let mut a: Vec<char> = Vec::with_capacity(c.len() + 4);
    let mut i = 0;
    while i < c.len() {
        let starts_word =
            i + 2 < c.len() && c[i + 1].is_ascii_uppercase() && c[i + 2].is_ascii_lowercase();
        if starts_word {
            a.push(c[i]);
            a.push('_');
            a.push(c[i + 1]);
            let mut j = i + 2;
            while j < c.len() && c[j].is_ascii_lowercase() {
                a.push(c[j]);
                j += 1;
            }
            i = j;
        } else {
            a.push(c[i]);
            i += 1;
        }
    }
    // `([a-z])([A-Z])` -> `\1_\2`.
    let mut out = String::with_capacity(a.len() + 4);
    let mut i = 0;
    while i < a.len() {
        if i + 1 < a.len() && a[i].is_ascii_lowercase() && a[i + 1].is_ascii_uppercase() {
            out.push(a[i]);
            out.push('_');
            out.push(a[i + 1]);
            i += 2;
        } else {
            out.push(a[i]);
            i += 1;
        }
    }
    out.to_lowercase()
}

/// Whether configuration key `key` of `cfg` leaves a variable in: absent, `true`, a number
/// other than 0, or any non-null value (`bias_axes: "c"`).
fn enabled(cfg: &Value, key: &str) -> bool {
    match cfg.get(key) {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(Value::Null) => false,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x != 0.0),
        Some(_) => true,
    }
}

/// Whether an optimizer's configuration turns section key `key` on.
fn turned_on(cfg: &Value, key: &str) -> bool {
    match cfg.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x > 0.0),
        _ => false,
    }
}

/// The variables a dataset group holds: `vars/0`, `vars/1`, ... as keys present in `keys`.
fn count_vars(keys: &[&str], group: &str) -> usize {
    (0..)
        .take_while(|i| {
            keys.binary_search(&format!("{group}/vars/{i}").as_str())
                .is_ok()
        })
        .count()
}

/// One named variable of the model: `(its name, its key, trainable)`.
type Named = (String, String, bool);

/// The layer's variables, named, if the table knows its class and the file agrees; `None`
/// otherwise.
fn layer_vars(
    keys: &[&str],
    class: &str,
    name: &str,
    cfg: &Value,
    group: &str,
) -> Option<Vec<Named>> {
    let holds = &LAYERS.iter().find(|(c, _)| *c == class)?.1;
    let own = |vars: &[Var], group: &str, prefix: &str| -> Option<Vec<Named>> {
        let present: Vec<&Var> = vars
            .iter()
            .filter(|v| v.when.is_none_or(|k| enabled(cfg, k)))
            .collect();
        if count_vars(keys, group) != present.len() {
            return None;
        }
        Some(
            present
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    (
                        format!("{prefix}/{}", v.name),
                        format!("{group}/vars/{i}"),
                        v.trainable,
                    )
                })
                .collect(),
        )
    };
    match holds {
        Holds::Vars(vars) => {
            if count_vars(keys, group) == 0 && vars.is_empty() {
                return Some(Vec::new());
            }
            own(vars, group, name)
        }
        Holds::Sub(subs) => {
            let mut out = Vec::new();
            for (attr, sub_name, vars) in subs.iter() {
                let sub = match sub_name {
                    Some(n) => (*n).to_string(),
                    None => format!("{}_cell", snake_case(class)),
                };
                out.extend(own(
                    vars,
                    &format!("{group}/{attr}"),
                    &format!("{name}/{sub}"),
                )?);
            }
            Some(out)
        }
    }
}

/// `names/` pairs for a Keras 3 file with configuration `config` and dataset keys `keys`
/// (sorted).
pub(crate) fn names(config: &Value, keys: &[&str]) -> Vec<(String, String)> {
    let Some(layers) = config
        .get("config")
        .and_then(|c| c.get("layers"))
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = Vec::new();
    // The model's trainable variables in order: `Some(name)`, or `None` for one not named.
    let mut trainable: Vec<Option<String>> = Vec::new();
    let mut unknown_layers = 0usize;
    let mut unknown_at = None;
    let mut used: std::collections::HashMap<String, usize> = Default::default();
    for l in layers {
        let class = l.get("class_name").and_then(Value::as_str).unwrap_or("");
        let cfg = l.get("config").unwrap_or(&Value::Null);
        let name = cfg.get("name").and_then(Value::as_str).unwrap_or("");
        let base = snake_case(class);
        let n = used.entry(base.clone()).or_insert(0);
        let group = if *n == 0 {
            format!("layers/{base}")
        } else {
            format!("layers/{base}_{n}")
        };
        *n += 1;
        let frozen = cfg.get("trainable") == Some(&Value::Bool(false));
        match layer_vars(keys, class, name, cfg, &group) {
            Some(vars) => {
                for (shown, key, t) in vars {
                    if t && !frozen {
                        trainable.push(Some(shown.clone()));
                    }
                    out.push((shown, key));
                }
            }
            None => {
                let has_vars = keys.iter().any(|k| {
                    k.strip_prefix(group.as_str())
                        .is_some_and(|r| r.starts_with('/'))
                });
                if has_vars {
                    unknown_layers += 1;
                    unknown_at = Some(trainable.len());
                }
            }
        }
    }
    out.extend(optimizer_names(
        config,
        keys,
        trainable,
        unknown_layers,
        unknown_at,
    ));
    out
}

/// The optimizer's variables, named where the trainable variables can be placed.
fn optimizer_names(
    config: &Value,
    keys: &[&str],
    mut trainable: Vec<Option<String>>,
    unknown_layers: usize,
    unknown_at: Option<usize>,
) -> Vec<(String, String)> {
    let Some(o) = config
        .get("compile_config")
        .and_then(|c| c.get("optimizer"))
    else {
        return Vec::new();
    };
    let class = o.get("class_name").and_then(Value::as_str).unwrap_or("");
    let cfg = o.get("config").unwrap_or(&Value::Null);
    let Some(prefix) = cfg.get("name").and_then(Value::as_str) else {
        return Vec::new();
    };
    let Some((_, sections)) = OPTIMIZERS.iter().find(|(c, _)| *c == class) else {
        return Vec::new();
    };
    let sections: Vec<&[&str]> = sections
        .iter()
        .filter(|(_, when)| when.is_none_or(|k| turned_on(cfg, k)))
        .map(|(s, _)| *s)
        .collect();
    let slots: usize = sections.iter().map(|s| s.len()).sum();
    let total = count_vars(keys, "optimizer");
    if total < 2 {
        return Vec::new();
    }
    // How many trainable variables the slots imply; an unknown layer takes the difference.
    let implied = if slots == 0 {
        trainable.len()
    } else if (total - 2) % slots == 0 {
        (total - 2) / slots
    } else {
        return Vec::new();
    };
    match (unknown_layers, unknown_at) {
        (0, _) if implied == trainable.len() => {}
        (1, Some(at)) if implied >= trainable.len() => {
            let missing = implied - trainable.len();
            trainable.splice(at..at, std::iter::repeat_n(None, missing));
        }
        _ => return Vec::new(),
    }
    if total != 2 + slots * trainable.len() {
        return Vec::new();
    }
    let mut out = vec![
        (
            format!("{prefix}/iteration"),
            "optimizer/vars/0".to_string(),
        ),
        (
            format!("{prefix}/learning_rate"),
            "optimizer/vars/1".to_string(),
        ),
    ];
    let mut i = 2usize;
    for section in sections {
        for var in &trainable {
            for slot in section.iter() {
                if let Some(var) = var {
                    out.push((
                        format!("{prefix}/{}_{slot}", var.replace('/', "_")),
                        format!("optimizer/vars/{i}"),
                    ));
                }
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_as_keras() {
        for (class, want) in [
            ("Dense", "dense"),
            ("Conv2D", "conv2d"),
            ("Conv2DTranspose", "conv2d_transpose"),
            ("PReLU", "p_re_lu"),
            ("LSTM", "lstm"),
            ("MultiHeadAttention", "multi_head_attention"),
            ("BatchNormalization", "batch_normalization"),
            ("DtypeZoo", "dtype_zoo"),
            ("RMSprop", "rm_sprop"),
            ("AdamW", "adam_w"),
        ] {
            assert_eq!(snake_case(class), want, "{class}");
        }
    }
}
