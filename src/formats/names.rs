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

use crate::sync::lock;
use std::collections::{HashMap, HashSet, VecDeque};

use crate::proto::saved_object::Kind as SavedKind;
use crate::proto::trackable_object_graph::trackable_object::ObjectReference;
use crate::proto::{SavedObjectGraph, TrackableObjectGraph};

pub(crate) const OBJECT_GRAPH_KEY: &[u8] = b"_CHECKPOINTABLE_OBJECT_GRAPH";

/// The hasher of the name maps: FxHash's multiply-rotate over 8-byte words. Names and keys are
/// the file's own (hostile input at worst costs collisions, not correctness), and a map of a
/// million names is hashed several times over: SipHash was a tenth of the time.
#[derive(Default, Clone, Copy)]
pub(crate) struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }

    fn write_u8(&mut self, b: u8) {
        self.write(&[b]);
    }

    fn write_usize(&mut self, n: usize) {
        self.write(&n.to_le_bytes());
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A map hashed with [`FxHasher`].
pub(crate) type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;
/// A set hashed with [`FxHasher`].
pub(crate) type FxSet<K> = HashSet<K, std::hash::BuildHasherDefault<FxHasher>>;
const VARIABLE_VALUE: &str = "VARIABLE_VALUE";

/// TensorFlow's escaping of a local name inside an object path (`.` → `..`, `/` → `.S`), so
/// names are the checkpoint keys' own object paths.
fn escape_local_name(n: &str) -> String {
    n.replace('.', "..").replace('/', ".S")
}

/// The object path of every node reachable from node 0: the shortest child-name path (BFS,
/// first path wins), local names escaped and joined by `/`; node 0's is empty. One string per
/// node, each made from its parent's.
fn paths<'a>(
    children: impl Fn(usize) -> Option<&'a [ObjectReference]>,
    n: usize,
) -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = vec![None; n];
    if n == 0 {
        return out;
    }
    out[0] = Some(String::new());
    let mut queue = VecDeque::from([0usize]);
    while let Some(i) = queue.pop_front() {
        for c in children(i).unwrap_or_default() {
            let Ok(j) = usize::try_from(c.node_id) else {
                continue;
            };
            if j < n && out[j].is_none() {
                let base = out[i].as_deref().unwrap_or("");
                let local = escape_local_name(&c.local_name);
                let mut p = String::with_capacity(base.len() + 1 + local.len());
                if i != 0 {
                    p.push_str(base);
                    p.push('/');
                }
                p.push_str(&local);
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
    let p = paths(|i| tog.nodes.get(i).map(|x| x.children.as_slice()), n);
    let mut out = Vec::new();
    for (i, path) in p.iter().enumerate() {
        // Node 0, the root, has no name.
        if i == 0 {
            continue;
        }
        if let (Some(path), Some(key)) = (path, value_key(tog, i)) {
            out.push((path.clone(), key));
        }
    }
    for node in &tog.nodes {
        for s in &node.slot_variables {
            let orig = usize::try_from(s.original_variable_node_id).ok();
            let slot = usize::try_from(s.slot_variable_node_id).ok();
            if let (Some(Some(path)), Some(slot)) = (orig.and_then(|o| p.get(o)), slot) {
                if let Some(key) = value_key(tog, slot) {
                    out.push((format!("{path}/{}", s.slot_name), key));
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
pub(crate) fn checkpoint_names(tog: &TrackableObjectGraph) -> Vec<(String, String)> {
    merge([object_path_names(tog), full_names(tog)])
}

/// A checkpoint's names and which of its keys hold a weight another key holds too.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    /// `names/`: `(name, key)` pairs.
    pub(crate) pairs: Vec<(String, String)>,
    /// Keys that hold the same weight as another key (a SavedModel that saved one weight as two
    /// variables, as Keras 3's `model.export()` does under `variables/N` and
    /// `_all_variables/N`): shown in `variables/` and under their object paths, but not named
    /// by the variable's name twice, nor twice in `weights.safetensors`.
    pub(crate) aliases: Vec<String>,
}

impl From<Vec<(String, String)>> for Names {
    fn from(pairs: Vec<(String, String)>) -> Names {
        Names {
            pairs,
            aliases: Vec::new(),
        }
    }
}

/// `(name, checkpoint key)` pairs for a SavedModel's variables: object paths, then each
/// `SavedVariable.name`, then the checkpoint's own variable names (the same as a rule).
///
/// One weight saved as two variables (Keras 3's `model.export()`: `variables/N` and
/// `_all_variables/N`, two `SavedVariable`s of the same name) is one weight: variables of the
/// same non-empty name whose keys hold the same bytes (`same_bytes`: dtype, shape, length and
/// stored CRC-32C alike) are one, the first in the graph's node order keeps the name, the
/// others are [`Names::aliases`], named by their object paths only. Two distinct variables of
/// one name with different values stay two (`Variable`, `Variable_1`).
pub(crate) fn saved_model_names(
    sog: &SavedObjectGraph,
    tog: &TrackableObjectGraph,
    same_bytes: &dyn Fn(&str, &str) -> bool,
) -> Names {
    let sp = paths(
        |i| sog.nodes.get(i).map(|x| x.children.as_slice()),
        sog.nodes.len(),
    );
    let tp = paths(
        |i| tog.nodes.get(i).map(|x| x.children.as_slice()),
        tog.nodes.len(),
    );
    let by_path: FxMap<&str, usize> = tp
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.as_deref().map(|p| (p, i)))
        .collect();
    let mut saved = Vec::new();
    let mut aliases = Vec::new();
    // The keys already named by each variable name.
    let mut named: FxMap<String, Vec<String>> = FxMap::default();
    for (i, node) in sog.nodes.iter().enumerate() {
        let Some(SavedKind::Variable(v)) = &node.kind else {
            continue;
        };
        let Some(Some(path)) = sp.get(i) else {
            continue;
        };
        let Some(key) = by_path.get(path.as_str()).and_then(|&t| value_key(tog, t)) else {
            continue;
        };
        if let Some(own) = own_name(&v.name) {
            let earlier = named.entry(own.clone()).or_default();
            if earlier.iter().any(|k| *k != key && same_bytes(k, &key)) {
                aliases.push(key);
                continue;
            }
            earlier.push(key.clone());
            saved.push((own, key));
        } else {
            saved.push((path.clone(), key));
        }
    }
    let alias_set: FxSet<&str> = aliases.iter().map(|k| k.as_str()).collect();
    let own: Vec<(String, String)> = full_names(tog)
        .into_iter()
        .filter(|(_, k)| !alias_set.contains(k.as_str()))
        .collect();
    let pairs = merge([object_path_names(tog), saved, own]);
    Names { pairs, aliases }
}

/// The lists in order, a pair already present dropped, then [`uniquify`]d.
fn merge<const N: usize>(lists: [Vec<(String, String)>; N]) -> Vec<(String, String)> {
    let all: Vec<(String, String)> = lists.into_iter().flatten().collect();
    let keep: Vec<bool> = {
        let mut seen: FxSet<(&str, &str)> = FxSet::default();
        seen.reserve(all.len());
        all.iter()
            .map(|(n, k)| seen.insert((n.as_str(), k.as_str())))
            .collect()
    };
    let all = all
        .into_iter()
        .zip(keep)
        .filter_map(|(p, k)| k.then_some(p))
        .collect();
    uniquify(all)
}

/// Gives later duplicates the first free `_N` suffix (free: no name given, no name in `names`).
/// Linear: the next suffix to try is remembered per name (a suffix once taken stays taken, so
/// no smaller one comes free), and each candidate tried is either taken by a name of `names`
/// (each such name is `<name>_<k>` for one name and one k) or by an earlier fresh name, or is
/// the one given. A name's first occurrence keeps it; no string is copied but the fresh ones.
pub(crate) fn uniquify(names: Vec<(String, String)>) -> Vec<(String, String)> {
    let renames: Vec<(usize, String)> = {
        let given: FxSet<&str> = names.iter().map(|(n, _)| n.as_str()).collect();
        let mut seen: FxSet<&str> = FxSet::default();
        seen.reserve(given.len());
        let mut fresh_taken: FxSet<String> = FxSet::default();
        let mut next: FxMap<&str, u64> = FxMap::default();
        let mut renames = Vec::new();
        for (i, (name, _)) in names.iter().enumerate() {
            if seen.insert(name.as_str()) {
                continue;
            }
            let k = next.entry(name.as_str()).or_insert(1);
            let mut c = String::with_capacity(name.len() + 8);
            loop {
                use std::fmt::Write;
                c.clear();
                c.push_str(name);
                // Writing to a String cannot fail.
                let _ = write!(c, "_{k}");
                *k += 1;
                if !given.contains(c.as_str()) && !fresh_taken.contains(&c) {
                    break;
                }
            }
            fresh_taken.insert(c.clone());
            renames.push((i, c));
        }
        renames
    };
    let mut renames = renames.into_iter().peekable();
    names
        .into_iter()
        .enumerate()
        .map(|(i, (name, key))| match renames.next_if(|(r, _)| *r == i) {
            Some((_, fresh)) => (fresh, key),
            None => (name, key),
        })
        .collect()
}

/// A checkpoint's `names/` pairs, made the first time something needs them (`names/`,
/// `weights.safetensors`), never at mount: a TF2 checkpoint's object graph is a tensor that
/// grows with the number of variables, and the names are a pass over all of it.
pub(crate) struct LazyNames {
    made: std::sync::OnceLock<Names>,
    make: std::sync::Mutex<Option<MakeNames>>,
}

type MakeNames = Box<dyn FnOnce() -> Names + Send>;

impl LazyNames {
    /// Names `make` gives when first asked for.
    pub(crate) fn new(make: impl FnOnce() -> Names + Send + 'static) -> LazyNames {
        LazyNames {
            made: std::sync::OnceLock::new(),
            make: std::sync::Mutex::new(Some(Box::new(make))),
        }
    }

    /// Names known already.
    pub(crate) fn ready(pairs: Vec<(String, String)>) -> LazyNames {
        LazyNames {
            made: std::sync::OnceLock::from(Names::from(pairs)),
            make: std::sync::Mutex::new(None),
        }
    }

    /// The pairs (made now, once, if not yet; a second caller waits for the first).
    pub(crate) fn get(&self) -> &[(String, String)] {
        &self.names().pairs
    }

    /// The names and aliases (made now, once, if not yet).
    pub(crate) fn names(&self) -> &Names {
        self.made.get_or_init(|| {
            let make = lock(&self.make).take();
            make.map(|f| f()).unwrap_or_default()
        })
    }

    /// Whether the pairs have been made (tests: nothing made them at mount).
    #[cfg(test)]
    pub(crate) fn is_made(&self) -> bool {
        self.made.get().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule as first written: each duplicate searches its suffix from `_1` up.
    fn uniquify_by_search(names: Vec<(String, String)>) -> Vec<(String, String)> {
        let mut taken: HashSet<String> = names.iter().map(|(n, _)| n.clone()).collect();
        let mut seen = HashSet::new();
        let mut out = Vec::new();
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

    #[test]
    fn uniquify_gives_the_first_free_suffix() {
        let pairs = |v: &[&str]| -> Vec<(String, String)> {
            v.iter()
                .enumerate()
                .map(|(i, n)| (n.to_string(), format!("k{i}")))
                .collect()
        };
        let names =
            |v: Vec<(String, String)>| -> Vec<String> { v.into_iter().map(|(n, _)| n).collect() };
        assert_eq!(
            names(uniquify(pairs(&["a", "a", "a_1", "a", "b", "a_2_1", "a"]))),
            ["a", "a_2", "a_1", "a_3", "b", "a_2_1", "a_4"]
        );
        // Keys stay with their pairs, in order.
        let u = uniquify(pairs(&["x", "x"]));
        assert_eq!(u[1], ("x_1".to_string(), "k1".to_string()));
        // Random lists over a few names and suffixes: the same names as the search.
        let mut rng = crate::testkit::rng::xorshift(25);
        for _ in 0..300 {
            let n = (rng() % 40) as usize;
            let v: Vec<String> = (0..n)
                .map(|_| match rng() % 4 {
                    0 => format!("v{}", rng() % 3),
                    1 => format!("v{}_{}", rng() % 3, rng() % 4),
                    2 => format!("v{}_{}_{}", rng() % 3, rng() % 3, rng() % 2),
                    _ => "v0".to_string(),
                })
                .collect();
            let refs: Vec<&str> = v.iter().map(|s| s.as_str()).collect();
            assert_eq!(
                uniquify(pairs(&refs)),
                uniquify_by_search(pairs(&refs)),
                "{v:?}"
            );
        }
    }

    #[test]
    fn uniquify_of_many_identical_names_is_linear() {
        // 200,000 identical names: the search tried ~2e10 candidates; this tries one each.
        let v: Vec<(String, String)> = (0..200_000)
            .map(|i| ("Variable".to_string(), i.to_string()))
            .collect();
        let u = uniquify(v);
        assert_eq!(u[0].0, "Variable");
        assert_eq!(u[199_999].0, "Variable_199999");
        let distinct: HashSet<&str> = u.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(distinct.len(), 200_000);
    }

    #[test]
    fn lazy_names_are_made_once_when_asked() {
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = calls.clone();
        let l = LazyNames::new(move || {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            vec![("n".to_string(), "k".to_string())].into()
        });
        assert!(!l.is_made());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(l.get().len(), 1);
        assert_eq!(l.get().len(), 1);
        assert!(l.is_made());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
