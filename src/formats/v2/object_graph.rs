//! A TF2 checkpoint's object graph (`_CHECKPOINTABLE_OBJECT_GRAPH`, tf-format.md §6) edited to
//! follow `export`'s edits of the checkpoint's keys, so that `tf.train.Checkpoint.restore`
//! still matches the objects it builds to the tensors written.
//!
//! - A dropped tensor leaves its object's attribute list. An object in whose subtree (what it
//!   owns: the objects below it on the shortest paths from the root) something was dropped and
//!   nothing holds a value any more (an attribute, a kept slot variable, a registered saver)
//!   leaves the graph with that subtree: an optimizer whose slots and counters were all dropped
//!   goes, and its edge from the root, though its `_trainable_variables` list still names the
//!   model's variables (which the model owns). Edges and slot-variable references to what left
//!   go too. Objects in which nothing was dropped are kept as they were, empty or not. Node ids
//!   are renumbered in order.
//! - A renamed tensor must be an object move: its key is its object's path (the escaped
//!   `local_name`s of the shortest chain of children from the root) and a tail
//!   (`/.ATTRIBUTES/VARIABLE_VALUE`), and the new key the object's new path and the same tail,
//!   at the same depth. The edges along the path are renamed; then every object's keys must be
//!   its new path and its tail: a rename that splits an object's attributes, changes a tail,
//!   leaves another key under a renamed edge behind, or gives two children of one object the
//!   same name is refused, naming the key. Moves to another depth (creating or removing
//!   intermediate objects) are refused too. Objects not reachable through children (slot
//!   variables, reachable through their optimizer's references) are renamed key by key.

use std::collections::{HashMap, VecDeque};

use crate::proto::trackable_object_graph::TrackableObject;
use crate::proto::TrackableObjectGraph;

/// What happens to a key: `None` it is not a tensor of the checkpoint (left as it is),
/// `Some(None)` dropped, `Some(Some(new))` kept under `new` (perhaps the same).
pub(crate) type KeyFate<'a> = &'a dyn Fn(&str) -> Option<Option<String>>;

/// TensorFlow's `escape_local_name`: `.` as `..`, `/` as `.S`.
fn escape(name: &str) -> String {
    name.replace('.', "..").replace('/', ".S")
}

/// The inverse of [`escape`]; `None` for a text no escaping makes.
fn unescape(s: &str) -> Option<String> {
    let mut out = String::new();
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '.' {
            match it.next() {
                Some('.') => out.push('.'),
                Some('S') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// A node's path and the parent and child index it is reached through (`None` for the root);
/// `None` for a node not reachable through children.
type Reached = Option<(String, Option<(usize, usize)>)>;

/// Each node's [`Reached`], by breadth-first search from the root (TensorFlow's shortest path).
fn paths(g: &TrackableObjectGraph) -> Vec<Reached> {
    let n = g.nodes.len();
    let mut out: Vec<Reached> = vec![None; n];
    if n == 0 {
        return out;
    }
    out[0] = Some((String::new(), None));
    let mut q = VecDeque::from([0usize]);
    while let Some(p) = q.pop_front() {
        let base = out[p].as_ref().map(|(s, _)| s.clone()).unwrap_or_default();
        for (i, c) in g.nodes[p].children.iter().enumerate() {
            let Ok(id) = usize::try_from(c.node_id) else {
                continue;
            };
            if id >= n || out[id].is_some() {
                continue;
            }
            let path = if base.is_empty() {
                escape(&c.local_name)
            } else {
                format!("{base}/{}", escape(&c.local_name))
            };
            out[id] = Some((path, Some((p, i))));
            q.push_back(id);
        }
    }
    out
}

/// `key` as `path` and a tail (`.ATTRIBUTES/NAME`), if it starts with `path/`.
fn tail<'a>(key: &'a str, path: &str) -> Option<&'a str> {
    if path.is_empty() {
        return Some(key);
    }
    key.strip_prefix(path)?.strip_prefix('/')
}

/// The graph `g` edited to follow `fate` (see the module's docs); an error names the key.
pub(crate) fn edit(
    g: &TrackableObjectGraph,
    fate: KeyFate<'_>,
) -> Result<TrackableObjectGraph, String> {
    let mut g = g.clone();
    let n = g.nodes.len();
    let old_paths = paths(&g);
    let mut touched = vec![false; n];
    // Attributes: dropped ones leave; renamed ones take their new key, and their objects'
    // edges are renamed below.
    let mut edge_renames: HashMap<(usize, usize), String> = HashMap::new();
    for id in 0..n {
        let mut kept = Vec::new();
        let attrs = std::mem::take(&mut g.nodes[id].attributes);
        for mut a in attrs {
            match fate(&a.checkpoint_key) {
                Some(None) => touched[id] = true,
                Some(Some(new)) if new != a.checkpoint_key => {
                    if let Some((path, _)) = &old_paths[id] {
                        let t = tail(&a.checkpoint_key, path).ok_or_else(|| {
                            format!("{}: not under its object's path {path}", a.checkpoint_key)
                        })?;
                        let new_path = new
                            .strip_suffix(t)
                            .and_then(|p| {
                                if path.is_empty() {
                                    Some(p)
                                } else {
                                    p.strip_suffix('/')
                                }
                            })
                            .ok_or_else(|| {
                                format!(
                                    "{} -> {new}: not an object move (the tail {t} changed)",
                                    a.checkpoint_key
                                )
                            })?;
                        rename_edges(
                            &g,
                            &old_paths,
                            id,
                            path,
                            new_path,
                            &a.checkpoint_key,
                            &new,
                            &mut edge_renames,
                        )?;
                    }
                    a.checkpoint_key = new;
                    kept.push(a);
                }
                _ => kept.push(a),
            }
        }
        g.nodes[id].attributes = kept;
    }
    for ((parent, child), name) in &edge_renames {
        g.nodes[*parent].children[*child].local_name = name.clone();
    }
    // Every object reachable through children: its keys are its new path and their tails.
    let new_paths = paths(&g);
    for id in 0..n {
        let (Some((old, _)), Some((new, _))) = (&old_paths[id], &new_paths[id]) else {
            continue;
        };
        for a in &g.nodes[id].attributes {
            if tail(&a.checkpoint_key, new).is_none_or(str::is_empty) {
                return Err(format!(
                    "{}: its object ({old}) is now at {new}, but this key was not renamed with it (not an object move)",
                    a.checkpoint_key
                ));
            }
        }
        let mut names = std::collections::HashSet::new();
        for c in &g.nodes[id].children {
            if !names.insert(c.local_name.as_str()) {
                return Err(format!(
                    "two children of {} would both be named {}",
                    if new.is_empty() { "the root" } else { new },
                    c.local_name
                ));
            }
        }
    }
    prune(&mut g, touched);
    Ok(g)
}

/// Records the renames of the edges along `id`'s path (`path` → `new_path`, the same depth)
/// that moving it asks for; refuses a conflict with renames already recorded.
#[allow(clippy::too_many_arguments)]
fn rename_edges(
    g: &TrackableObjectGraph,
    paths: &[Reached],
    id: usize,
    path: &str,
    new_path: &str,
    key: &str,
    new_key: &str,
    renames: &mut HashMap<(usize, usize), String>,
) -> Result<(), String> {
    let old: Vec<&str> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').collect()
    };
    let new: Vec<&str> = if new_path.is_empty() {
        Vec::new()
    } else {
        new_path.split('/').collect()
    };
    if old.len() != new.len() {
        return Err(format!(
            "{key} -> {new_key}: moves its object from depth {} to {} (creating or removing objects on the way is not supported)",
            old.len(),
            new.len()
        ));
    }
    // Walk up from the object: the edge into each ancestor.
    let mut at = id;
    for depth in (0..old.len()).rev() {
        let Some((_, Some((parent, child)))) = &paths[at] else {
            break;
        };
        if old[depth] != new[depth] {
            let name = unescape(new[depth]).ok_or_else(|| {
                format!(
                    "{key} -> {new_key}: {} is not an escaped object name",
                    new[depth]
                )
            })?;
            match renames.get(&(*parent, *child)) {
                Some(other) if *other != name => {
                    return Err(format!(
                    "{key} -> {new_key}: renames {} to {name}, another key renames it to {other}",
                    g.nodes[*parent].children[*child].local_name
                ))
                }
                _ => {
                    renames.insert((*parent, *child), name);
                }
            }
        }
        at = *parent;
    }
    Ok(())
}

/// Removes the objects that lost something and hold nothing any more, then renumbers. An
/// object owns what lies below it on the shortest paths from the root (its subtree of the
/// breadth-first tree: a variable the optimizer's `_trainable_variables` lists belongs to the
/// model); an object goes when something in its subtree was dropped and nothing in it holds a
/// value (an attribute, a slot variable kept, a registered saver). Objects reached only through
/// slot references go when they lost their attributes. Edges and slot references to what went
/// go with it.
fn prune(g: &mut TrackableObjectGraph, touched: Vec<bool>) {
    let n = g.nodes.len();
    let mut gone = vec![false; n];
    let tree = paths(g);
    // Not reachable through children (slot variables): by themselves.
    for id in 1..n {
        if tree[id].is_none() && touched[id] && holds_self(&g.nodes[id]) == Some(false) {
            gone[id] = true;
        }
    }
    let kept = |i: i32, gone: &[bool]| usize::try_from(i).is_ok_and(|i| i < n && !gone[i]);
    // The breadth-first order, children after parents.
    let mut order: Vec<usize> = (0..n).filter(|&i| tree[i].is_some()).collect();
    order.sort_by_key(|&i| {
        tree[i].as_ref().map_or(0, |(p, _)| {
            p.matches('/').count() + usize::from(!p.is_empty())
        })
    });
    let mut holds = vec![false; n];
    let mut lost = touched.clone();
    for &id in order.iter().rev() {
        let o = &g.nodes[id];
        holds[id] |= !o.attributes.is_empty()
            || o.registered_saver.is_some()
            || o.slot_variables.iter().any(|r| {
                kept(r.slot_variable_node_id, &gone) && kept(r.original_variable_node_id, &gone)
            });
        if let Some((_, Some((parent, _)))) = &tree[id] {
            let (h, l) = (holds[id], lost[id]);
            holds[*parent] |= h;
            lost[*parent] |= l;
        }
    }
    for &id in &order {
        if id != 0 && lost[id] && !holds[id] {
            gone[id] = true;
        }
    }
    for o in &mut g.nodes {
        o.children.retain(|c| kept(c.node_id, &gone));
        o.slot_variables.retain(|r| {
            kept(r.slot_variable_node_id, &gone) && kept(r.original_variable_node_id, &gone)
        });
    }
    let mut new_id = vec![0i32; n];
    let mut next = 0i32;
    for id in 0..n {
        if !gone[id] {
            new_id[id] = next;
            next += 1;
        }
    }
    let map = |i: i32| {
        usize::try_from(i)
            .ok()
            .filter(|&i| i < n)
            .map_or(i, |i| new_id[i])
    };
    let nodes = std::mem::take(&mut g.nodes);
    g.nodes = nodes
        .into_iter()
        .enumerate()
        .filter(|(id, _)| !gone[*id])
        .map(|(_, mut o)| {
            for c in &mut o.children {
                c.node_id = map(c.node_id);
            }
            for r in &mut o.slot_variables {
                r.slot_variable_node_id = map(r.slot_variable_node_id);
                r.original_variable_node_id = map(r.original_variable_node_id);
            }
            o
        })
        .collect();
}

/// Whether an object holds a value itself (an attribute, a registered saver); `None` if it
/// has children or slot references (decided with them).
fn holds_self(o: &TrackableObject) -> Option<bool> {
    if !o.attributes.is_empty() || o.registered_saver.is_some() {
        return Some(true);
    }
    (o.children.is_empty() && o.slot_variables.is_empty()).then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::trackable_object_graph::trackable_object::{
        ObjectReference, SerializedTensor, SlotVariableReference,
    };

    fn obj(children: &[(i32, &str)], keys: &[&str]) -> TrackableObject {
        TrackableObject {
            children: children
                .iter()
                .map(|&(node_id, n)| ObjectReference {
                    node_id,
                    local_name: n.into(),
                })
                .collect(),
            attributes: keys
                .iter()
                .map(|k| SerializedTensor {
                    name: "VARIABLE_VALUE".into(),
                    full_name: String::new(),
                    checkpoint_key: k.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// root -> model -> {enc -> kernel, dec -> kernel}, root -> optimizer (iter, a slot of
    /// enc/kernel), root -> save_counter.
    fn graph() -> TrackableObjectGraph {
        let v = "/.ATTRIBUTES/VARIABLE_VALUE";
        let k = |p: &str| format!("{p}{v}");
        let mut opt = obj(&[(8, "iter")], &[]);
        opt.slot_variables.push(SlotVariableReference {
            original_variable_node_id: 3,
            slot_name: "m".into(),
            slot_variable_node_id: 7,
        });
        TrackableObjectGraph {
            nodes: vec![
                obj(&[(1, "model"), (6, "optimizer"), (9, "save_counter")], &[]),
                obj(&[(2, "enc"), (4, "dec")], &[]),
                obj(&[(3, "kernel")], &[]),
                obj(&[], &[&k("model/enc/kernel")]),
                obj(&[(5, "kernel")], &[]),
                obj(&[], &[&k("model/dec/kernel")]),
                opt,
                obj(&[], &[&k("model/enc/kernel/.OPTIMIZER_SLOT/optimizer/m")]),
                obj(&[], &[&k("optimizer/iter")]),
                obj(&[], &[&k("save_counter")]),
            ],
        }
    }

    fn keys(g: &TrackableObjectGraph) -> Vec<String> {
        let mut v: Vec<String> = g
            .nodes
            .iter()
            .flat_map(|o| o.attributes.iter().map(|a| a.checkpoint_key.clone()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn weights_only_leaves_the_optimizer_and_its_slots_out() {
        let g = graph();
        let fate = |k: &str| {
            Some((k.starts_with("model/") && !k.contains(".OPTIMIZER_SLOT")).then(|| k.to_string()))
        };
        let e = edit(&g, &fate).unwrap();
        assert_eq!(
            keys(&e),
            [
                "model/dec/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                "model/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE"
            ]
        );
        // root, model, enc, enc/kernel, dec, dec/kernel.
        assert_eq!(e.nodes.len(), 6);
        let root: Vec<&str> = e.nodes[0]
            .children
            .iter()
            .map(|c| c.local_name.as_str())
            .collect();
        assert_eq!(root, ["model"]);
        let p = paths(&e);
        for (id, o) in e.nodes.iter().enumerate() {
            for a in &o.attributes {
                let (path, _) = p[id].as_ref().unwrap();
                assert!(
                    a.checkpoint_key.starts_with(path.as_str()),
                    "{}",
                    a.checkpoint_key
                );
            }
        }
    }

    #[test]
    fn a_renamed_submodule_is_an_edge_renamed() {
        let g = graph();
        let fate = |k: &str| Some(Some(k.replace("model/enc/", "model/encoder/")));
        let e = edit(&g, &fate).unwrap();
        assert_eq!(e.nodes.len(), g.nodes.len());
        assert_eq!(e.nodes[1].children[0].local_name, "encoder");
        assert!(keys(&e).contains(&"model/encoder/kernel/.ATTRIBUTES/VARIABLE_VALUE".to_string()));
        // The slot's key follows (renamed key by key: reached through its optimizer).
        assert!(keys(&e).contains(
            &"model/encoder/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"
                .to_string()
        ));
    }

    #[test]
    fn renames_that_are_not_object_moves_are_refused() {
        let g = graph();
        // A tail changed.
        let f1 = |k: &str| Some(Some(k.replace("VARIABLE_VALUE", "VALUE")));
        assert!(edit(&g, &f1).unwrap_err().contains("not an object move"));
        // Another depth.
        let f2 = |k: &str| Some(Some(k.replace("model/enc/", "enc/")));
        assert!(edit(&g, &f2).unwrap_err().contains("depth"));
        // Two children named alike.
        let f3 = |k: &str| Some(Some(k.replace("model/enc/", "model/dec/")));
        assert!(edit(&g, &f3).unwrap_err().contains("both be named dec"));
        // A key under a renamed edge left behind: only the slot's object... here, enc's kernel
        // renamed through `model` while dec's is not.
        let f4 = |k: &str| {
            Some(Some(if k.starts_with("model/enc/kernel/.A") {
                k.replace("model/", "net/")
            } else {
                k.to_string()
            }))
        };
        assert!(edit(&g, &f4).unwrap_err().contains("not renamed with it"));
    }

    /// Hostile object graphs (every byte of a real one's encoding flipped, every cut, random
    /// node ids: cycles, ids out of range or negative) give a graph or an error, never a panic.
    #[test]
    fn hostile_object_graphs_never_panic() {
        use prost::Message;
        let bytes = graph().encode_to_vec();
        let fates: [KeyFate<'_>; 3] = [
            &|k: &str| Some((!k.contains("optimizer")).then(|| k.to_string())),
            &|k: &str| Some(Some(k.replace("model/enc/", "model/encoder/"))),
            &|_: &str| None,
        ];
        let run = |b: &[u8]| {
            if let Ok(g) = TrackableObjectGraph::decode(b) {
                for f in &fates {
                    let _ = edit(&g, *f);
                }
            }
        };
        for cut in 0..bytes.len() {
            run(&bytes[..cut]);
        }
        for i in 0..bytes.len() {
            for x in [0xffu8, 0x01, 0x80, 0x7f] {
                let mut b = bytes.clone();
                b[i] ^= x;
                run(&b);
            }
        }
        let mut rng = crate::testkit::rng::Rng::new(7);
        for _ in 0..300 {
            let mut g = graph();
            for o in &mut g.nodes {
                for c in &mut o.children {
                    c.node_id = rng.below(14) as i32 - 2;
                }
                for r in &mut o.slot_variables {
                    r.slot_variable_node_id = rng.below(14) as i32 - 2;
                }
            }
            for f in &fates {
                let _ = edit(&g, *f);
            }
        }
    }

    #[test]
    fn names_are_escaped_as_tensorflow_escapes_them() {
        assert_eq!(escape("a.b/c"), "a..b.Sc");
        assert_eq!(unescape("a..b.Sc").as_deref(), Some("a.b/c"));
        assert_eq!(unescape("a.x"), None);
    }
}
