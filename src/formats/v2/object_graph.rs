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
//!   `local_name`s of a chain of children from the root: the one the key names, else the
//!   shortest) and a tail (`/.ATTRIBUTES/VARIABLE_VALUE`), and the new key the object's new
//!   path and the same tail. At the same depth the edges along the path are renamed. At another
//!   depth the highest object whose path changes (found from the components both paths end
//!   with alike: `model/enc/kernel` -> `model/blocks/enc/kernel` moves `model/enc`) leaves its
//!   parent and becomes a child of the object at its new path's parent, empty objects made on
//!   the way where none is; a parent left holding nothing goes. Then every key of an object
//!   reachable through children must name a path that leads to it: a rename that splits an
//!   object's attributes, changes a tail, leaves another key under a renamed edge or a moved
//!   object behind, or gives two children of one object the same name is refused, naming the
//!   key. Objects not reachable through children (slot variables, reachable through their
//!   optimizer's references) are renamed key by key.

use std::collections::{HashMap, VecDeque};

use crate::proto::trackable_object_graph::trackable_object::ObjectReference;
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

/// One edge on a path from the root: the parent, the child's index among its children, the
/// child.
type Edge = (usize, usize, usize);

/// The edges from the root along `path` (escaped names, `/`-separated; `""`: none), if each
/// step is a child of that name.
fn walk(g: &TrackableObjectGraph, path: &str) -> Option<Vec<Edge>> {
    let mut chain = Vec::new();
    let mut at = 0usize;
    if g.nodes.is_empty() {
        return None;
    }
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        let name = unescape(comp)?;
        let (i, c) = g.nodes[at]
            .children
            .iter()
            .enumerate()
            .find(|(_, c)| c.local_name == name)?;
        let next = usize::try_from(c.node_id)
            .ok()
            .filter(|&n| n < g.nodes.len())?;
        chain.push((at, i, next));
        at = next;
    }
    Some(chain)
}

/// The path a key names its object by: what comes before `/.ATTRIBUTES/` (TensorFlow's
/// attribute keys), `""` for the root's own.
fn key_path(key: &str) -> Option<&str> {
    match key.split_once("/.ATTRIBUTES/") {
        Some((p, _)) => Some(p),
        None => key.starts_with(".ATTRIBUTES/").then_some(""),
    }
}

/// The path of node `id` that `key` (one of its attributes') is under, and the edges along it:
/// the path the key itself names when it leads to `id` (a key written along another path than
/// the shortest: after a move, or where an optimizer's list reaches a variable first), else its
/// shortest path. `None` for a node not reachable through children (renamed key by key).
fn object_path(
    g: &TrackableObjectGraph,
    paths: &[Reached],
    id: usize,
    key: &str,
) -> Result<Option<(String, Vec<Edge>)>, String> {
    if let Some(p) = key_path(key) {
        if let Some(chain) = walk(g, p) {
            if chain.last().map_or(0, |e| e.2) == id {
                return Ok(Some((p.to_string(), chain)));
            }
        }
    }
    let Some((path, _)) = &paths[id] else {
        return Ok(None);
    };
    if tail(key, path).is_none() {
        return Err(format!("{key}: not under its object's path {path}"));
    }
    let chain =
        walk(g, path).ok_or_else(|| format!("{key}: its object's path {path} is not a path"))?;
    Ok(Some((path.clone(), chain)))
}

/// The graph `g` edited to follow `fate` (see the module's docs); an error names the key.
pub(crate) fn edit(
    g: &TrackableObjectGraph,
    fate: KeyFate<'_>,
) -> Result<TrackableObjectGraph, String> {
    let old = g;
    let mut g = g.clone();
    let n = g.nodes.len();
    let old_paths = paths(&g);
    let mut touched = vec![false; n];
    // Attributes: dropped ones leave; renamed ones take their new key, and their objects'
    // edges are renamed (a move at the same depth) or their objects moved (another depth)
    // below.
    let mut edge_renames: HashMap<(usize, usize), String> = HashMap::new();
    let mut moves: HashMap<usize, (String, String)> = HashMap::new();
    for (id, lost) in touched.iter_mut().enumerate() {
        let mut kept = Vec::new();
        let attrs = std::mem::take(&mut g.nodes[id].attributes);
        for mut a in attrs {
            match fate(&a.checkpoint_key) {
                Some(None) => *lost = true,
                Some(Some(new)) if new != a.checkpoint_key => {
                    if let Some((path, chain)) =
                        object_path(old, &old_paths, id, &a.checkpoint_key)?
                    {
                        let t = tail(&a.checkpoint_key, &path).ok_or_else(|| {
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
                        let (from, to) = (components(&path), components(new_path));
                        let what = (a.checkpoint_key.as_str(), new.as_str());
                        if from.len() == to.len() {
                            rename_edges(old, &chain, &from, &to, what, &mut edge_renames)?;
                        } else {
                            record_move(&chain, &from, &to, what, &mut moves)?;
                        }
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
    apply_moves(&mut g, &moves, &mut touched)?;
    // Every attribute of an object reachable through children: the path its key names leads
    // to it (a key left behind by a renamed edge or a moved object does not).
    let reach = paths(&g);
    for (id, o) in g.nodes.iter().enumerate() {
        if reach[id].is_none() {
            continue;
        }
        for a in &o.attributes {
            let leads = key_path(&a.checkpoint_key)
                .and_then(|p| walk(&g, p))
                .is_some_and(|c| c.last().map_or(0, |e| e.2) == id);
            if !leads {
                return Err(format!(
                    "{}: its object is no longer at the path this key names, and the key was not renamed with it (not an object move)",
                    a.checkpoint_key
                ));
            }
        }
        let mut names = std::collections::HashSet::new();
        for c in &o.children {
            if !names.insert(c.local_name.as_str()) {
                let at = reach[id].as_ref().map_or("", |(p, _)| p.as_str());
                return Err(format!(
                    "two children of {} would both be named {}",
                    if at.is_empty() { "the root" } else { at },
                    c.local_name
                ));
            }
        }
    }
    prune(&mut g, touched);
    Ok(g)
}

/// A path's components (escaped names).
fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|c| !c.is_empty()).collect()
}

/// Records the renames of the edges along a path (`chain`, from `from` to `to`, the same
/// depth) that moving a key's object asks for; refuses a conflict with renames already
/// recorded.
fn rename_edges(
    g: &TrackableObjectGraph,
    chain: &[Edge],
    from: &[&str],
    to: &[&str],
    (key, new_key): (&str, &str),
    renames: &mut HashMap<(usize, usize), String>,
) -> Result<(), String> {
    for (depth, &(parent, child, _)) in chain.iter().enumerate() {
        if from[depth] == to[depth] {
            continue;
        }
        let name = unescape(to[depth]).ok_or_else(|| {
            format!(
                "{key} -> {new_key}: {} is not an escaped object name",
                to[depth]
            )
        })?;
        match renames.get(&(parent, child)) {
            Some(other) if *other != name => {
                return Err(format!(
                    "{key} -> {new_key}: renames {} to {name}, another key renames it to {other}",
                    g.nodes[parent].children[child].local_name
                ))
            }
            _ => {
                renames.insert((parent, child), name);
            }
        }
    }
    Ok(())
}

/// Records the move a key's rename asks for when its object's path changes depth: the object
/// that moves is the highest whose path changes, found from the components the old and the new
/// path end with alike (`model/enc/kernel` -> `model/blocks/enc/kernel` moves `model/enc` to
/// `model/blocks/enc`); refuses a conflict with moves already recorded.
fn record_move(
    chain: &[Edge],
    from: &[&str],
    to: &[&str],
    (key, new_key): (&str, &str),
    moves: &mut HashMap<usize, (String, String)>,
) -> Result<(), String> {
    let mut same = 0;
    while same < from.len()
        && same < to.len()
        && from[from.len() - 1 - same] == to[to.len() - 1 - same]
    {
        same += 1;
    }
    // The moved object: `same - 1` levels above the key's (itself when nothing is alike).
    let up = same.saturating_sub(1);
    let (keep_from, keep_to) = (from.len() - up, to.len() - up);
    if keep_from == 0 || keep_to == 0 {
        return Err(format!(
            "{key} -> {new_key}: moves the root (not an object move)"
        ));
    }
    let moved = chain
        .get(keep_from - 1)
        .map(|e| e.2)
        .ok_or_else(|| format!("{key}: not under its object's path"))?;
    for c in &to[..keep_to] {
        unescape(c)
            .ok_or_else(|| format!("{key} -> {new_key}: {c} is not an escaped object name"))?;
    }
    let m = (from[..keep_from].join("/"), to[..keep_to].join("/"));
    match moves.get(&moved) {
        Some(other) if *other != m => Err(format!(
            "{key} -> {new_key}: moves {} to {}, another key moves it to {}",
            m.0, m.1, other.1
        )),
        _ => {
            moves.insert(moved, m);
            Ok(())
        }
    }
}

/// Moves each object of `moves` (node -> (old path, new path)) to its new path: its edge
/// leaves its old parent (which counts as having lost something, so that it goes if nothing is
/// left in it), and it becomes the child of the object at its new path's parent, objects made
/// on the way where none is (empty ones, as a module that only holds others).
fn apply_moves(
    g: &mut TrackableObjectGraph,
    moves: &HashMap<usize, (String, String)>,
    touched: &mut Vec<bool>,
) -> Result<(), String> {
    let mut order: Vec<(&usize, &(String, String))> = moves.iter().collect();
    order.sort();
    // Detached first, all (marked, then removed: the edges' indices stay valid until then).
    for (_, (old, _)) in &order {
        let chain = walk(g, old).ok_or_else(|| format!("{old}: not a path to move"))?;
        let &(parent, child, _) = chain.last().ok_or("the root does not move")?;
        g.nodes[parent].children[child].node_id = -1;
        touched[parent] = true;
    }
    for o in &mut g.nodes {
        o.children.retain(|c| c.node_id != -1);
    }
    for (&m, (old, new)) in &order {
        let comps: Vec<String> = components(new)
            .into_iter()
            .map(|c| unescape(c).unwrap_or_default())
            .collect();
        let (last, dirs) = comps.split_last().ok_or("an empty path")?;
        let mut at = 0usize;
        for name in dirs {
            let found = g.nodes[at]
                .children
                .iter()
                .find(|c| c.local_name == *name)
                .and_then(|c| usize::try_from(c.node_id).ok())
                .filter(|&i| i < g.nodes.len());
            at = match found {
                Some(i) => i,
                None => {
                    let i = g.nodes.len();
                    let id = i32::try_from(i).map_err(|_| "too many objects")?;
                    g.nodes.push(TrackableObject::default());
                    touched.push(false);
                    g.nodes[at].children.push(ObjectReference {
                        node_id: id,
                        local_name: name.clone(),
                    });
                    i
                }
            };
        }
        if g.nodes[at].children.iter().any(|c| c.local_name == *last) {
            return Err(format!(
                "{old} -> {new}: {} already has a child named {last}",
                if dirs.is_empty() {
                    "the root"
                } else {
                    "its new parent"
                }
            ));
        }
        let id = i32::try_from(m).map_err(|_| "too many objects")?;
        g.nodes[at].children.push(ObjectReference {
            node_id: id,
            local_name: last.clone(),
        });
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
        // A move onto an object that is there.
        let f2 = |k: &str| {
            Some(Some(if k.starts_with("model/enc/kernel/.A") {
                "save_counter/.ATTRIBUTES/VARIABLE_VALUE".to_string()
            } else {
                k.to_string()
            }))
        };
        assert!(edit(&g, &f2)
            .unwrap_err()
            .contains("the root already has a child named save_counter"));
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

    /// The children's names from the root along `path` (`/`-separated), each node's id.
    fn walk(g: &TrackableObjectGraph, path: &str) -> Option<usize> {
        let mut at = 0usize;
        for name in path.split('/') {
            let c = g.nodes[at].children.iter().find(|c| c.local_name == name)?;
            at = usize::try_from(c.node_id).ok()?;
        }
        Some(at)
    }

    #[test]
    fn moves_to_another_depth_make_and_leave_objects() {
        let g = graph();
        // Deeper: model/enc under model/blocks/0 (two objects made on the way); the slot's key
        // (reached through its optimizer) follows key by key.
        let fate = |k: &str| Some(Some(k.replace("model/enc/", "model/blocks/0/enc/")));
        let e = edit(&g, &fate).unwrap();
        let kernel = walk(&e, "model/blocks/0/enc/kernel").expect("moved");
        assert_eq!(
            e.nodes[kernel].attributes[0].checkpoint_key,
            "model/blocks/0/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE"
        );
        assert!(walk(&e, "model/enc").is_none(), "the old edge is gone");
        assert!(walk(&e, "model/dec/kernel").is_some());
        assert_eq!(e.nodes.len(), g.nodes.len() + 2);
        assert!(keys(&e).contains(
            &"model/blocks/0/enc/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE"
                .to_string()
        ));
        // The slot reference still names the moved variable.
        let opt = walk(&e, "optimizer").unwrap();
        assert_eq!(
            e.nodes[opt].slot_variables[0].original_variable_node_id as usize,
            kernel
        );
        // Up: model/enc to the root as enc, then model/dec's kernel up into model (its dec,
        // empty after, leaves the graph).
        let up = |k: &str| {
            Some(Some(
                k.replace("model/enc/", "enc/")
                    .replace("model/dec/kernel/", "model/kernel/"),
            ))
        };
        let e = edit(&g, &up).unwrap();
        assert!(walk(&e, "enc/kernel").is_some() && walk(&e, "model/kernel").is_some());
        assert!(walk(&e, "model/enc").is_none() && walk(&e, "model/dec").is_none());
        assert_eq!(e.nodes.len(), g.nodes.len() - 1, "dec left the graph");
        // Two objects, each moved.
        let half = |k: &str| {
            Some(Some(
                if k == "model/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE" {
                    "model/x/enc/kernel/.ATTRIBUTES/VARIABLE_VALUE".to_string()
                } else {
                    k.replace("model/dec/", "model/y/dec/")
                },
            ))
        };
        assert!(edit(&g, &half).is_ok(), "two objects, two moves");
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
