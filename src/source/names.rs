//! The names users know for TF2 variables (tf-format.md §6, §9): object-based checkpoints key
//! tensors by object paths (`net/l1/kernel/.ATTRIBUTES/VARIABLE_VALUE`); this maps friendlier
//! names to those keys.
//! - From a checkpoint's `_CHECKPOINTABLE_OBJECT_GRAPH`: the object path (local names from the
//!   root, shortest first, escaped as TensorFlow does — `.` → `..`, `/` → `.S` — and joined by
//!   `/`) of every object with a `VARIABLE_VALUE` attribute, and
//!   optimizer slots as `<variable path>/<slot name>`.
//! - From a SavedModel's object graph: each `SavedVariable`'s own `name` (`dense/kernel`), matched
//!   to the checkpoint by its object path.
//!
//! Collision rule: names are taken in object-graph node order; a name already taken gets the
//! first free `_1`, `_2`, ... suffix, as TensorFlow itself uniquifies variable names.

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
    tog.nodes
        .get(node)?
        .attributes
        .iter()
        .find(|a| a.name == VARIABLE_VALUE)
        .map(|a| a.checkpoint_key.clone())
}

/// `(name, checkpoint key)` pairs from a checkpoint's object graph.
pub fn checkpoint_names(tog: &TrackableObjectGraph) -> Vec<(String, String)> {
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
    uniquify(out)
}

/// `(name, checkpoint key)` pairs for a SavedModel's variables.
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
    let mut out = Vec::new();
    for (i, node) in sog.nodes.iter().enumerate() {
        let Some(SavedKind::Variable(v)) = &node.kind else {
            continue;
        };
        let Some(path) = &sp[i] else { continue };
        let Some(key) = by_path.get(path).and_then(|&t| value_key(tog, t)) else {
            continue;
        };
        let name = v.name.strip_suffix(":0").unwrap_or(&v.name);
        let name = if name.is_empty() {
            path.join("/")
        } else {
            name.to_string()
        };
        out.push((name, key));
    }
    uniquify(out)
}

/// Gives later duplicates the first free `_N` suffix.
pub fn uniquify(names: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut taken: HashSet<String> = names.iter().map(|(n, _)| n.clone()).collect();
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(names.len());
    for (name, key) in names {
        if seen.insert(name.clone()) {
            out.push((name, key));
            continue;
        }
        let mut k = 1;
        let fresh = loop {
            let c = format!("{name}_{k}");
            if !taken.contains(&c) {
                break c;
            }
            k += 1;
        };
        taken.insert(fresh.clone());
        seen.insert(fresh.clone());
        out.push((fresh, key));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collisions_get_suffixes() {
        let v = |a: &str, b: &str| (a.to_string(), b.to_string());
        let got = uniquify(vec![v("k", "a"), v("k", "b"), v("k_1", "c"), v("k", "d")]);
        assert_eq!(
            got,
            vec![v("k", "a"), v("k_2", "b"), v("k_1", "c"), v("k_3", "d")]
        );
    }
}
