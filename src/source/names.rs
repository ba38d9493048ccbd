//! The names users know for TF2 variables (tf-format.md §6, §9): object-based checkpoints key
//! tensors by object paths (`net/l1/kernel/.ATTRIBUTES/VARIABLE_VALUE`); this maps friendlier
//! names to those keys. Two kinds of names, both kept because users know both:
//! - object paths: from a checkpoint's `_CHECKPOINTABLE_OBJECT_GRAPH`, the path (local names from
//!   the root, shortest first, escaped as TensorFlow does — `.` → `..`, `/` → `.S` — and joined
//!   by `/`) of every object with a `VARIABLE_VALUE` attribute, and optimizer slots as
//!   `<variable path>/<slot name>` — what `tf.train.list_variables` shows, without the
//!   `/.ATTRIBUTES/VARIABLE_VALUE` tail;
//! - variable names: each variable's own name, `SerializedTensor.full_name` in the object graph
//!   (`seq/hidden/kernel`, what `v.name` / Keras' `v.path` give, without a `:0` tail) and, for a
//!   SavedModel, each `SavedVariable`'s `name`, matched to the checkpoint by its object path.
//!   Keras 3 reaches a model's variables through `optimizer/_trainable_variables/N` first, so for
//!   those only the variable names say what they are.
//!
//! Collision rule: object paths first, then variable names, each in object-graph node order; a
//! name already given to the same key is not repeated, a name already taken by another key gets
//! the first free `_1`, `_2`, ... suffix, as TensorFlow itself uniquifies variable names (TF2
//! does not: two unnamed variables are both `Variable`).
//!
//! `weights.safetensors` names each weight by the last name a key has here (for a TF2
//! checkpoint, its variable name).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::proto::saved_object::Kind as SavedKind;
use crate::proto::trackable_object_graph::trackable_object::ObjectReference;
use crate::proto::{SavedObjectGraph, TrackableObjectGraph};

pub const OBJECT_GRAPH_KEY: &[u8] = b"_CHECKPOINTABLE_OBJECT_GRAPH";
const VARIABLE_VALUE: &str = "VARIABLE_VALUE";

/// TensorFlow's escaping of a local name inside an object path (`.` → `..`, `/` → `.S`), so
/// names are the checkpoint keys' own object paths.
fn escape_local_name(n: &str) -> String {
    n.replace('.', "..").replace('/', ".S")
}

/// Shortest child-name path of every node reachable from node 0 (BFS, first path wins).
fn paths(
    children: impl Fn(usize) -> Option<Vec<ObjectReference>>,
    n: usize,
) -> Vec<Option<Vec<String>>> {
    let mut out: Vec<Option<Vec<String>>> = vec![None; n];
    if n == 0 {
        return out;
    }
    out[0] = Some(Vec::new());
    let mut queue = VecDeque::from([0usize]);
    while let Some(i) = queue.pop_front() {
        let base = out[i].clone().unwrap_or_default();
        for c in children(i).unwrap_or_default() {
            let Ok(j) = usize::try_from(c.node_id) else {
                continue;
            };
            if j < n && out[j].is_none() {
                let mut p = base.clone();
                p.push(escape_local_name(&c.local_name));
                out[j] = Some(p);
                queue.push_back(j);
            }
        }
    }
    out
}

fn value_key(tog: &TrackableObjectGraph, node: usize) -> Option<String> {
    value_attr(tog, node).map(|a| a.checkpoint_key.clone())
}

fn value_attr(
    tog: &TrackableObjectGraph,
    node: usize,
) -> Option<&crate::proto::trackable_object_graph::trackable_object::SerializedTensor> {
    tog.nodes
        .get(node)?
        .attributes
        .iter()
        .find(|a| a.name == VARIABLE_VALUE)
}

/// A variable's own name as stored (`full_name`, `SavedVariable.name`) without TensorFlow's
/// `:0` output suffix; `None` when empty.
fn own_name(name: &str) -> Option<String> {
    let name = name.strip_suffix(":0").unwrap_or(name);
    (!name.is_empty()).then(|| name.to_string())
}

/// Object-path names, not yet uniquified.
fn object_path_names(tog: &TrackableObjectGraph) -> Vec<(String, String)> {
    let n = tog.nodes.len();
    let p = paths(|i| tog.nodes.get(i).map(|x| x.children.clone()), n);
    let mut out = Vec::new();
    for (i, path) in p.iter().enumerate() {
        if let (Some(path), Some(key)) = (path, value_key(tog, i)) {
            if !path.is_empty() {
                out.push((path.join("/"), key));
            }
        }
    }
    for node in &tog.nodes {
        for s in &node.slot_variables {
            let orig = usize::try_from(s.original_variable_node_id).ok();
            let slot = usize::try_from(s.slot_variable_node_id).ok();
            if let (Some(Some(path)), Some(slot)) = (orig.and_then(|o| p.get(o)), slot) {
                if let Some(key) = value_key(tog, slot) {
                    out.push((format!("{}/{}", path.join("/"), s.slot_name), key));
                }
            }
        }
    }
    out
}

/// Variable names (`full_name`), in node order, not yet uniquified.
fn full_names(tog: &TrackableObjectGraph) -> Vec<(String, String)> {
    (0..tog.nodes.len())
        .filter_map(|i| {
            let a = value_attr(tog, i)?;
            Some((own_name(&a.full_name)?, a.checkpoint_key.clone()))
        })
        .collect()
}

/// `(name, checkpoint key)` pairs from a checkpoint's object graph: object paths, then variable
/// names (see the module doc).
pub fn checkpoint_names(tog: &TrackableObjectGraph) -> Vec<(String, String)> {
    merge([object_path_names(tog), full_names(tog)])
}

/// `(name, checkpoint key)` pairs for a SavedModel's variables: object paths, then each
/// `SavedVariable.name`, then the checkpoint's own variable names (the same as a rule).
pub fn saved_model_names(
    sog: &SavedObjectGraph,
    tog: &TrackableObjectGraph,
) -> Vec<(String, String)> {
    let sp = paths(
        |i| sog.nodes.get(i).map(|x| x.children.clone()),
        sog.nodes.len(),
    );
    let tp = paths(
        |i| tog.nodes.get(i).map(|x| x.children.clone()),
        tog.nodes.len(),
    );
    let by_path: HashMap<&Vec<String>, usize> = tp
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_ref().map(|p| (p, i)))
        .collect();
    let mut saved = Vec::new();
    for (i, node) in sog.nodes.iter().enumerate() {
        let Some(SavedKind::Variable(v)) = &node.kind else {
            continue;
        };
        let Some(Some(path)) = sp.get(i) else {
            continue;
        };
        let Some(key) = by_path.get(path).and_then(|&t| value_key(tog, t)) else {
            continue;
        };
        let name = own_name(&v.name).unwrap_or_else(|| path.join("/"));
        saved.push((name, key));
    }
    merge([object_path_names(tog), saved, full_names(tog)])
}

/// The lists in order, a pair already present dropped, then [`uniquify`]d.
fn merge<const N: usize>(lists: [Vec<(String, String)>; N]) -> Vec<(String, String)> {
    let mut seen = HashSet::new();
    let all = lists
        .into_iter()
        .flatten()
        .filter(|p| seen.insert(p.clone()))
        .collect();
    uniquify(all)
}

/// Gives later duplicates the first free `_N` suffix. Linear: the next suffix to try is
/// remembered per name (a suffix once taken stays taken, so no smaller one can come free), and
/// each candidate tried is either taken (by an earlier name, at most once per taken name) or
/// the one given.
pub fn uniquify(names: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut taken: HashSet<String> = names.iter().map(|(n, _)| n.clone()).collect();
    let mut seen: HashSet<String> = HashSet::with_capacity(names.len());
    // Per name given a suffix: the next suffix to try.
    let mut next: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::with_capacity(names.len());
    for (name, key) in names {
        if !seen.contains(&name) {
            seen.insert(name.clone());
            out.push((name, key));
            continue;
        }
        let k = next.entry(name.clone()).or_insert(1);
        let mut c = String::with_capacity(name.len() + 8);
        let fresh = loop {
            use std::fmt::Write;
            c.clear();
            c.push_str(&name);
            // Writing to a String cannot fail.
            let _ = write!(c, "_{k}");
            *k += 1;
            if !taken.contains(&c) {
                break c;
            }
        };
        taken.insert(fresh.clone());
        seen.insert(fresh.clone());
        out.push((fresh, key));
    }
    out
}

/// A checkpoint's `names/` pairs, made the first time something needs them (`names/`,
/// `weights.safetensors`), never at mount: a TF2 checkpoint's object graph is a tensor that
/// grows with the number of variables, and the names are a pass over all of it.
pub struct LazyNames {
    made: std::sync::OnceLock<Vec<(String, String)>>,
    make: std::sync::Mutex<Option<MakeNames>>,
}

type MakeNames = Box<dyn FnOnce() -> Vec<(String, String)> + Send>;

impl LazyNames {
    /// Names `make` gives when first asked for.
    pub fn new(make: impl FnOnce() -> Vec<(String, String)> + Send + 'static) -> LazyNames {
        LazyNames {
            made: std::sync::OnceLock::new(),
            make: std::sync::Mutex::new(Some(Box::new(make))),
        }
    }

    /// Names known already.
    pub fn ready(pairs: Vec<(String, String)>) -> LazyNames {
        LazyNames {
            made: std::sync::OnceLock::from(pairs),
            make: std::sync::Mutex::new(None),
        }
    }

    /// The pairs (made now, once, if not yet; a second caller waits for the first).
    pub fn get(&self) -> &[(String, String)] {
        self.made.get_or_init(|| {
            let make = self.make.lock().unwrap_or_else(|p| p.into_inner()).take();
            make.map(|f| f()).unwrap_or_default()
        })
    }

    /// Whether the pairs have been made (tests: nothing made them at mount).
    pub fn is_made(&self) -> bool {
        self.made.get().is_some()
    }
}
