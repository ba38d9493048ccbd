//! `export`: a new checkpoint written from any SOURCE tfmount reads, with tensors kept, dropped
//! or renamed on the way ([`Edit`]s, applied in the order given). The bytes written are the
//! tensors as `variables/` serves them (a partitioned tensor whole, a quantized TF.js or TFLite
//! weight as served); every tensor is checked against what its source stores to check it by
//! before the output is made whole (a damaged source tensor is never copied), and the output
//! appears at `OUT` only when it is whole ([`crate::formats::v2::write`]).
//!
//! Outputs: a TF V2 checkpoint (`--to tf`). A TF2 checkpoint's object graph
//! (`_CHECKPOINTABLE_OBJECT_GRAPH`) is copied as it is when no tensor is dropped or renamed,
//! else edited to follow (`formats::v2::object_graph`: dropped tensors leave their objects,
//! renames must be object moves); `--no-object-graph` leaves it out and writes a name-keyed
//! checkpoint (TF1 style: `tf.train.load_checkpoint` and `init_from_checkpoint` read it;
//! `tf.train.Checkpoint.restore` does not).

use std::path::{Path, PathBuf};

use regex::bytes::Regex;

use super::open::{Ckpt, Item, TensorInfo};
use crate::formats::saved_model_write::SavedModelWriter;
use crate::formats::v2::write::BundleWriter;
use crate::parse::dtype::{DType, DT_STRING, DT_VARIANT};

/// A TF2 checkpoint's object graph: the checkpoint's structure, not a weight.
pub(crate) const OBJECT_GRAPH: &[u8] = b"_CHECKPOINTABLE_OBJECT_GRAPH";

/// Bytes read from the source at a time.
const CHUNK: usize = 1 << 20;

/// What `export` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum To {
    /// A TF V2 checkpoint: `OUT.index`, `OUT.data-*`.
    Tf,
    /// One `.safetensors` file: every numeric tensor, `__metadata__` naming the source.
    Safetensors,
    /// A SavedModel directory: SOURCE's graph and assets, its variables rewritten.
    SavedModel,
}

impl To {
    pub(crate) fn name(self) -> &'static str {
        match self {
            To::Tf => "tf",
            To::Safetensors => "safetensors",
            To::SavedModel => "savedmodel",
        }
    }

    /// What is written when `--to` is not given: `.safetensors` for an OUT ending so, else a
    /// SavedModel from a SavedModel SOURCE, else a TF checkpoint.
    fn default_for(source_is_saved_model: bool, out: &Path) -> To {
        if out
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
        {
            To::Safetensors
        } else if source_is_saved_model {
            To::SavedModel
        } else {
            To::Tf
        }
    }
}

/// A glob over keys: `*` and `?` within a path component (not `/`), `**` across components;
/// anything else stands for itself. It matches a whole key.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    re: Option<Regex>,
    /// Keys matched as they are, and prefixes every key under which matches (an edits
    /// journal's drops, [`Glob::keys`]).
    keys: std::collections::HashSet<Vec<u8>>,
    prefixes: Vec<Vec<u8>>,
}

impl Glob {
    pub(crate) fn new(text: &str) -> Result<Glob, String> {
        let mut re = String::from("^");
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '*' if chars.peek() == Some(&'*') => {
                    chars.next();
                    re.push_str(".*");
                }
                '*' => re.push_str("[^/]*"),
                '?' => re.push_str("[^/]"),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
        }
        re.push('$');
        let re = Regex::new(&re).map_err(|e| format!("glob {text}: {e}"))?;
        Ok(Glob {
            re: Some(re),
            keys: Default::default(),
            prefixes: Vec::new(),
        })
    }

    /// Matches exactly `keys`, and every key that starts with one of `prefixes`.
    pub(crate) fn keys(keys: std::collections::HashSet<Vec<u8>>, prefixes: Vec<Vec<u8>>) -> Glob {
        Glob {
            re: None,
            keys,
            prefixes,
        }
    }

    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        self.keys.contains(key)
            || self.prefixes.iter().any(|p| key.starts_with(p))
            || self.re.as_ref().is_some_and(|r| r.is_match(key))
    }
}

/// One edit of the selection, applied in command-line order.
#[derive(Debug, Clone)]
pub(crate) enum Edit {
    /// Only the tensors whose key matches are kept.
    Keep(Glob),
    /// The tensors whose key matches go.
    Drop(Glob),
    /// Only the model's weights are kept (the selection `weights.safetensors` makes: no
    /// optimizer slots or state, no bookkeeping).
    WeightsOnly,
    /// The first match of the pattern in each key is replaced (`$1`, `${name}` for groups).
    Rename { re: Regex, to: String },
    /// Float tensors (float32, float64, float16, bfloat16) whose key matches (all without a
    /// glob) are converted to the dtype, as `tf.cast` converts.
    Cast { to: DType, glob: Option<Glob> },
    /// The tensor at the key (as named so far; a new one if none is) takes these values.
    Set { key: Vec<u8>, value: SetValue },
}

/// Where `--set` takes a tensor's new values from.
#[derive(Debug, Clone)]
pub(crate) enum SetValue {
    /// The array of an `.npy` file (C order, little-endian).
    Npy(PathBuf),
    /// A tensor of another SOURCE, by its key.
    Tensor(PathBuf, Vec<u8>),
}

impl Edit {
    /// `--set KEY=FILE.npy` or `--set KEY=SOURCE2:KEY2`: split at the first `=`; a value ending
    /// `.npy` is a file, else it is split at its first `:` not followed by `//` (so that
    /// `s3://bucket/ckpt:dense/kernel` names the key `dense/kernel`).
    pub(crate) fn set(arg: &str) -> Result<Edit, String> {
        let (key, value) = arg
            .split_once('=')
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .ok_or_else(|| format!("--set {arg}: expected KEY=FILE.npy or KEY=SOURCE:KEY"))?;
        let value = if value.to_ascii_lowercase().ends_with(".npy") {
            SetValue::Npy(PathBuf::from(value))
        } else {
            let at = value
                .match_indices(':')
                .map(|(i, _)| i)
                .find(|&i| !value[i + 1..].starts_with("//"))
                .ok_or_else(|| format!("--set {arg}: expected KEY=FILE.npy or KEY=SOURCE:KEY"))?;
            SetValue::Tensor(
                PathBuf::from(&value[..at]),
                value.as_bytes()[at + 1..].to_vec(),
            )
        };
        Ok(Edit::Set {
            key: key.as_bytes().to_vec(),
            value,
        })
    }

    /// `--cast DTYPE[:GLOB]`.
    pub(crate) fn cast(arg: &str) -> Result<Edit, String> {
        let (name, glob) = match arg.split_once(':') {
            Some((n, g)) => (n, Some(Glob::new(g)?)),
            None => (arg, None),
        };
        let to = DType::from_name(name)
            .filter(|d| super::cast::castable(*d))
            .ok_or_else(|| {
                format!("--cast {arg}: {name} is not float32, float64, float16 or bfloat16")
            })?;
        Ok(Edit::Cast { to, glob })
    }

    /// The rename of key `from` (or, `subtree`, of every key under `from/`) to `to`: a pattern
    /// of `from`'s bytes, anchored, and a replacement of `to`'s.
    pub(crate) fn rename_exact(from: &[u8], to: &[u8], subtree: bool) -> Result<Edit, String> {
        let lit = |k: &[u8]| k.iter().map(|b| format!("\\x{b:02x}")).collect::<String>();
        let pat = if subtree {
            format!("(?s-u)^{}/", lit(from))
        } else {
            format!("(?s-u)^{}$", lit(from))
        };
        let re = Regex::new(&pat)
            .map_err(|e| format!("rename {}: {e}", String::from_utf8_lossy(from)))?;
        let mut to = String::from_utf8(to.to_vec())
            .map_err(|_| format!("rename to {}: not UTF-8", String::from_utf8_lossy(to)))?
            .replace('$', "$$");
        if subtree {
            to.push('/');
        }
        Ok(Edit::Rename { re, to })
    }

    /// `--rename REGEX=REPLACEMENT`, split at the first `=` (a pattern that needs one writes
    /// `\x3d`).
    pub(crate) fn rename(arg: &str) -> Result<Edit, String> {
        let (pat, to) = arg
            .split_once('=')
            .ok_or_else(|| format!("--rename {arg}: expected REGEX=REPLACEMENT"))?;
        let re = Regex::new(pat).map_err(|e| format!("--rename {arg}: {e}"))?;
        Ok(Edit::Rename {
            re,
            to: to.to_string(),
        })
    }
}

/// How `export` is asked to run.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// What to write (`None`: by OUT's name and SOURCE's kind, [`To::default_for`]).
    pub(crate) to: Option<To>,
    /// Bytes per data file at most (`None`: one).
    pub(crate) shard_size: Option<u64>,
    pub(crate) force: bool,
    pub(crate) dry_run: bool,
    /// Leave a TF2 checkpoint's object graph out (a name-keyed checkpoint).
    pub(crate) no_object_graph: bool,
    /// `--variables-from CKPT`: every tensor of SOURCE but its object graph takes its values
    /// from the tensor of CKPT that matches it ([`graft`]), before the edits.
    pub(crate) variables_from: Option<PathBuf>,
    /// `--names`: `--variables-from` matches by `names/` names, not keys.
    pub(crate) by_names: bool,
    pub(crate) edits: Vec<Edit>,
}

/// One step of the plan, as `--dry-run` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// `D key`: left out.
    Drop(Vec<u8>),
    /// `R old -> new`.
    Rename(Vec<u8>, Vec<u8>),
    /// `C key float32 -> bfloat16` (the key written).
    Cast(Vec<u8>, DType, DType),
    /// `S key (shape [3, 2] float32)`: new values (the key written).
    Set(Vec<u8>, Vec<u64>, DType),
}

impl Step {
    pub(crate) fn line(&self) -> String {
        let esc = |k: &[u8]| String::from_utf8_lossy(&super::lines::escape(k)).into_owned();
        match self {
            Step::Drop(k) => format!("D {}", esc(k)),
            Step::Rename(a, b) => format!("R {} -> {}", esc(a), esc(b)),
            Step::Cast(k, a, b) => {
                format!("C {} {} -> {}", esc(k), a.display_name(), b.display_name())
            }
            Step::Set(k, shape, d) => {
                format!("S {} (shape {shape:?} {})", esc(k), d.display_name())
            }
        }
    }
}

/// Where a planned tensor's bytes come from.
enum From {
    /// A tensor of checkpoint `i` (0: SOURCE; then the checkpoints `--set` names).
    Tensor(usize, TensorInfo),
    /// The data of an `.npy` file: `len` bytes from `offset`.
    Npy {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
}

/// One tensor to write.
struct Planned {
    from: From,
    /// Its key in SOURCE, for a tensor of SOURCE (its values perhaps replaced by `--set`);
    /// `None` for a tensor `--set` adds.
    orig: Option<Vec<u8>>,
    key: Vec<u8>,
    /// The dtype written, and the one read where `--cast` converts.
    dtype: DType,
    cast_from: Option<DType>,
    shape: Vec<u64>,
    /// Its served bytes made here, not read (an edited object graph).
    made: Option<Vec<u8>>,
    /// Its dtype and shape in SOURCE (for a tensor of SOURCE).
    was: Option<(Option<DType>, Vec<u64>)>,
}

impl Planned {
    /// What messages name it by: its key in SOURCE, else its new key.
    fn shown(&self) -> String {
        String::from_utf8_lossy(self.orig.as_deref().unwrap_or(&self.key)).into_owned()
    }

    fn is_object_graph(&self) -> bool {
        self.orig.as_deref() == Some(OBJECT_GRAPH) && self.made.is_none()
    }
}

/// What `export` did (or, with `dry_run`, would do).
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(crate) out: PathBuf,
    pub(crate) to: To,
    pub(crate) tensors: u64,
    pub(crate) bytes: u64,
    pub(crate) dropped: u64,
    pub(crate) renamed: u64,
    pub(crate) files: Vec<PathBuf>,
    pub(crate) dry_run: bool,
}

/// Writes the checkpoint `out` from `source` as `opts` says; each step of the plan is given to
/// `step` first (in key order of the source). Errors are one line naming the file or tensor.
pub(crate) fn export(
    source: &Path,
    out: &Path,
    opts: &Options,
    step: &mut dyn FnMut(&Step),
) -> Result<Summary, String> {
    let saved_model = super::open::saved_model_of(source)?;
    let to = opts
        .to
        .unwrap_or_else(|| To::default_for(saved_model.is_some(), out));
    if to == To::SavedModel && saved_model.is_none() {
        return Err(format!(
            "{}: not a SavedModel (--to savedmodel rewrites the variables of one; --to tf writes a checkpoint)",
            source.display()
        ));
    }
    let mut cks = vec![super::open::one_checkpoint(source)?];
    let Plan {
        tensors: mut plan,
        steps,
        object_graph,
    } = plan(&mut cks, opts)?;
    if to == To::SavedModel {
        graph_can_follow(&plan, &steps)?;
    }
    for s in &steps {
        step(s);
    }
    let dropped = steps.iter().filter(|s| matches!(s, Step::Drop(_))).count() as u64;
    let renamed = steps
        .iter()
        .filter(|s| matches!(s, Step::Rename(..)))
        .count() as u64;
    let edited = dropped > 0 || renamed > 0;
    if object_graph {
        if to == To::Safetensors || opts.no_object_graph {
            // The checkpoint's structure, not a weight: left out of safetensors without
            // complaint, and where asked.
            plan.retain(|p| !p.is_object_graph());
        } else if edited {
            let made = edited_object_graph(&cks, &plan, &steps)?;
            if let Some(p) = plan.iter_mut().find(|p| p.is_object_graph()) {
                p.made = Some(made);
            }
        }
    }
    let mut summary = Summary {
        out: out.to_path_buf(),
        to,
        tensors: plan.len() as u64,
        bytes: 0,
        dropped,
        renamed,
        files: Vec::new(),
        dry_run: opts.dry_run,
    };
    if opts.dry_run {
        for p in &plan {
            summary.bytes += written_size(p, served_size(&cks, p).unwrap_or(0));
        }
        return Ok(summary);
    }
    match to {
        To::SavedModel => {
            let Some((store, dir)) = saved_model else {
                return Err(format!("{}: not a SavedModel", source.display()));
            };
            let mut sm = SavedModelWriter::create(out, opts.force)?;
            // Its files but the variables checkpoint, as they are.
            let is_variables = |rel: &Path| {
                let mut c = rel.components();
                c.next().is_some_and(|a| a.as_os_str() == "variables")
                    && c.next().is_some_and(|b| {
                        let b = b.as_os_str().to_string_lossy();
                        b == "variables.index" || b.starts_with("variables.data-")
                    })
                    && c.next().is_none()
            };
            let copied = sm.copy_tree(&*store, &dir, &is_variables)?;
            let mut w = BundleWriter::create(&sm.variables()?, opts.shard_size, false)?;
            for p in &plan {
                write_one(&cks, p, &mut w)?;
            }
            let wrote = w.finish()?;
            summary.bytes = wrote.bytes + copied;
            summary.files = vec![sm.finish()?];
        }
        To::Tf => {
            let mut w = BundleWriter::create(out, opts.shard_size, opts.force)?;
            // The tensors in the order they are stored (as TensorFlow writes in `Add` order):
            // by key.
            for p in &plan {
                write_one(&cks, p, &mut w)?;
            }
            let wrote = w.finish()?;
            summary.bytes = wrote.bytes;
            summary.files = wrote.files;
        }
        To::Safetensors => {
            for p in &plan {
                if crate::parse::safetensors::safetensors_dtype(p.dtype).is_none() {
                    let k = p.shown();
                    return Err(format!(
                        "{k}: its dtype, {}, is one safetensors cannot hold (--drop '{}' leaves it out)",
                        p.dtype.display_name(),
                        k.replace('\'', "'\\''")
                    ));
                }
            }
            let (bytes, files) = write_safetensors(&cks, source, &plan, out, opts.force)?;
            summary.bytes = bytes;
            summary.files = files;
        }
    }
    Ok(summary)
}

/// What [`plan`] decides.
struct Plan {
    /// The tensors to write, with their new keys, in the output's key order.
    tensors: Vec<Planned>,
    steps: Vec<Step>,
    /// Whether SOURCE's object graph is among them, under its own key.
    object_graph: bool,
}

/// The dtype a SOURCE tensor is written with, or why it cannot be.
fn writable(key: &[u8], dtype: &str) -> Result<DType, String> {
    DType::from_name(dtype)
        .filter(|d| *d == DT_STRING || d.elem_size().is_some())
        .ok_or_else(|| {
            let k = String::from_utf8_lossy(key);
            format!(
                "{k}: its dtype, {dtype}, is one export cannot write (--drop '{}' leaves it out)",
                k.replace('\'', "'\\''")
            )
        })
}

/// Whether a tensor's served bytes are its stored bytes with a stored CRC (a whole tensor of a
/// V2 checkpoint): a variant is copied so, as it is.
fn stored_as_is(t: &TensorInfo) -> bool {
    !t.partitioned && t.crc.is_some()
}

/// Every tensor of `ck`, or why its index cannot be read whole.
fn tensors_of(ck: &Ckpt) -> Result<Vec<TensorInfo>, String> {
    let name = ck.prefix().display().to_string();
    let mut all = Vec::new();
    for item in ck.walk() {
        match item {
            Item::Tensor(t) => all.push(t),
            Item::BadEntry { key, reason } => {
                return Err(format!(
                    "{name}: {}: {reason} (a damaged source is not exported)",
                    String::from_utf8_lossy(&key)
                ))
            }
            Item::BadBlock { block, reason, .. } => {
                return Err(format!(
                    "{name}: index block {}: {reason} (a damaged source is not exported)",
                    block + 1
                ))
            }
            Item::MissingShard { file, .. } => {
                return Err(format!(
                    "{}: missing (a checkpoint file of {name})",
                    file.display()
                ))
            }
        }
    }
    Ok(all)
}

/// The values `--set` names, opened: where they come from, their dtype and shape.
fn set_from(
    cks: &mut Vec<Ckpt>,
    key: &[u8],
    value: &SetValue,
) -> Result<(From, DType, Vec<u64>), String> {
    let k = String::from_utf8_lossy(key);
    match value {
        SetValue::Npy(path) => {
            let (dtype, shape, offset, len) =
                crate::formats::edited::npy_array(path).map_err(|e| format!("--set {k}: {e}"))?;
            Ok((
                From::Npy {
                    path: path.clone(),
                    offset,
                    len,
                },
                dtype,
                shape,
            ))
        }
        SetValue::Tensor(source, key2) => {
            let ck = super::open::one_checkpoint(source).map_err(|e| format!("--set {k}: {e}"))?;
            let t = tensors_of(&ck)?
                .into_iter()
                .find(|t| t.key == *key2)
                .ok_or_else(|| {
                    format!(
                        "--set {k}: {} has no tensor {}",
                        source.display(),
                        String::from_utf8_lossy(key2)
                    )
                })?;
            let dtype = writable(&t.key, &t.dtype)?;
            let shape = t.shape.clone();
            cks.push(ck);
            Ok((From::Tensor(cks.len() - 1, t), dtype, shape))
        }
    }
}

fn plan(cks: &mut Vec<Ckpt>, opts: &Options) -> Result<Plan, String> {
    /// A tensor while the edits are applied.
    struct Cur {
        from: From,
        orig: Option<Vec<u8>>,
        /// Its current key; `None` once dropped.
        key: Option<Vec<u8>>,
        /// Its dtype as read (`None`: one export cannot write, said if it is kept).
        read: Option<DType>,
        /// Its dtype after the casts so far.
        dtype: Option<DType>,
        shape: Vec<u64>,
        set: bool,
        was: Option<(Option<DType>, Vec<u64>)>,
    }
    let mut cur: Vec<Cur> = tensors_of(&cks[0])?
        .into_iter()
        .map(|t| {
            let d = DType::from_name(&t.dtype);
            Cur {
                orig: Some(t.key.clone()),
                key: Some(t.key.clone()),
                read: d,
                dtype: d,
                shape: t.shape.clone(),
                was: Some((d, t.shape.clone())),
                from: From::Tensor(0, t),
                set: false,
            }
        })
        .collect();
    if let Some(other) = &opts.variables_from {
        let ck =
            super::open::one_checkpoint(other).map_err(|e| format!("--variables-from: {e}"))?;
        let theirs = tensors_of(&ck)?;
        let ours: Vec<&TensorInfo> = cur
            .iter()
            .filter_map(|c| match &c.from {
                From::Tensor(_, t) => Some(t),
                From::Npy { .. } => None,
            })
            .collect();
        let pairs = graft(&cks[0], &ours, other, &ck, &theirs, opts.by_names)?;
        cks.push(ck);
        let at = cks.len() - 1;
        for (i, j) in pairs {
            let t = theirs[j].clone();
            let c = &mut cur[i];
            c.from = From::Tensor(at, t);
            c.set = true;
        }
    }
    for e in &opts.edits {
        if let Edit::Set { key, value } = e {
            let (from, dtype, shape) = set_from(cks, key, value)?;
            let c = match cur
                .iter_mut()
                .find(|c| c.key.as_deref() == Some(key.as_slice()))
            {
                Some(c) => c,
                None => {
                    cur.push(Cur {
                        from: From::Npy {
                            path: PathBuf::new(),
                            offset: 0,
                            len: 0,
                        },
                        orig: None,
                        key: Some(key.clone()),
                        read: None,
                        dtype: None,
                        shape: Vec::new(),
                        set: true,
                        was: None,
                    });
                    let n = cur.len() - 1;
                    &mut cur[n]
                }
            };
            c.from = from;
            c.read = Some(dtype);
            c.dtype = Some(dtype);
            c.shape = shape;
            c.set = true;
            continue;
        }
        for c in cur.iter_mut() {
            let Some(key) = c.key.as_ref() else { continue };
            if let Edit::Cast { to, glob } = e {
                let chosen = glob.as_ref().is_none_or(|g| g.matches(key));
                if chosen && c.dtype.is_some_and(super::cast::castable) {
                    c.dtype = Some(*to);
                }
                continue;
            }
            let keep = match e {
                Edit::Keep(g) => g.matches(key),
                Edit::Drop(g) => !g.matches(key),
                // The object graph is the checkpoint's structure: kept with the weights.
                Edit::WeightsOnly => {
                    crate::formats::weights::is_weight(key) || key.as_slice() == OBJECT_GRAPH
                }
                Edit::Rename { .. } | Edit::Cast { .. } | Edit::Set { .. } => true,
            };
            if !keep {
                c.key = None;
                continue;
            }
            if let Edit::Rename { re, to } = e {
                let new = re.replace(key, to.as_bytes()).into_owned();
                c.key = Some(new);
            }
        }
    }
    let mut steps = Vec::new();
    let mut plan = Vec::new();
    let mut object_graph = false;
    let mut seen: std::collections::HashMap<Vec<u8>, String> = std::collections::HashMap::new();
    for c in cur {
        let shown = String::from_utf8_lossy(c.orig.as_deref().or(c.key.as_deref()).unwrap_or(b""))
            .into_owned();
        let Some(key) = c.key else {
            if let Some(o) = c.orig {
                steps.push(Step::Drop(o));
            }
            continue;
        };
        if key.is_empty() {
            return Err(format!("{shown}: renamed to an empty key"));
        }
        if let Some(other) = seen.insert(key.clone(), shown.clone()) {
            return Err(format!(
                "{other} and {shown} would both be written as {}",
                String::from_utf8_lossy(&key)
            ));
        }
        if let Some(o) = c.orig.as_ref().filter(|o| **o != key) {
            steps.push(Step::Rename(o.clone(), key.clone()));
        }
        if c.orig.as_deref() == Some(OBJECT_GRAPH) && key == OBJECT_GRAPH && !c.set {
            object_graph = true;
        }
        let read = match (&c.from, c.read) {
            (_, Some(d)) if d == DT_STRING || d.elem_size().is_some() => d,
            (From::Tensor(_, t), Some(DT_VARIANT)) if stored_as_is(t) => DT_VARIANT,
            (From::Tensor(_, t), _) => writable(&t.key, &t.dtype)?,
            _ => return Err(format!("{shown}: a dtype export cannot write")),
        };
        let dtype = c.dtype.unwrap_or(read);
        if c.set {
            steps.push(Step::Set(key.clone(), c.shape.clone(), read));
        }
        let cast_from = (dtype != read).then(|| {
            steps.push(Step::Cast(key.clone(), read, dtype));
            read
        });
        plan.push(Planned {
            from: c.from,
            orig: c.orig,
            key,
            dtype,
            cast_from,
            shape: c.shape,
            made: None,
            was: c.was,
        });
    }
    // Written in the output's key order.
    plan.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(Plan {
        tensors: plan,
        steps,
        object_graph,
    })
}

/// `--variables-from`: for each of `ours` (SOURCE's tensors, in order) but the object graph, the
/// index in `theirs` (the tensors of `ck`, checkpoint `other`) of the tensor it takes its
/// values from: `(our index, their index)`. By key: the same key, or the same key under one
/// object path of `ck` that holds them all (`model/` of a training checkpoint written as
/// `tf.train.Checkpoint(model=..., optimizer=...)`, grafted into the model's SavedModel); with
/// `by_names`, by `names/` names (a checkpoint without `names/` is named by its keys). Every one
/// must match exactly one of theirs, of the same dtype and shape, or it is refused, listing
/// those that do not.
fn graft(
    ck0: &Ckpt,
    ours: &[&TensorInfo],
    other: &Path,
    ck: &Ckpt,
    theirs: &[TensorInfo],
    by_names: bool,
) -> Result<Vec<(usize, usize)>, String> {
    use std::collections::HashMap;
    let by_key: HashMap<&[u8], usize> = theirs
        .iter()
        .enumerate()
        .map(|(j, t)| (t.key.as_slice(), j))
        .collect();
    let wanted: Vec<usize> = (0..ours.len())
        .filter(|&i| ours[i].key != OBJECT_GRAPH)
        .collect();
    let show = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    let how;
    let found: Vec<Option<usize>> = if by_names {
        how = "by names/ names".to_string();
        let our_names: HashMap<&[u8], &str> = ck0
            .names()
            .unwrap_or_default()
            .iter()
            .map(|(n, k)| (k.as_bytes(), n.as_str()))
            .collect();
        let their_keys: Option<HashMap<&str, &[u8]>> = ck
            .names()
            .map(|n| n.iter().map(|(n, k)| (n.as_str(), k.as_bytes())).collect());
        wanted
            .iter()
            .map(|&i| {
                let k = ours[i].key.as_slice();
                let name: &[u8] = match ck0.names() {
                    Some(_) => our_names.get(k)?.as_bytes(),
                    None => k,
                };
                let key = match &their_keys {
                    Some(m) => *m.get(std::str::from_utf8(name).ok()?)?,
                    None => name,
                };
                by_key.get(key).copied()
            })
            .collect()
    } else {
        // The object paths of theirs a first few of ours are found under.
        let mut prefixes: Vec<Vec<u8>> = vec![Vec::new()];
        for &i in wanted.iter().take(4) {
            let k = &ours[i].key;
            for t in theirs {
                if t.key.len() > k.len()
                    && t.key.ends_with(k)
                    && t.key[t.key.len() - k.len() - 1] == b'/'
                {
                    let p = t.key[..t.key.len() - k.len()].to_vec();
                    if !prefixes.contains(&p) {
                        prefixes.push(p);
                    }
                }
            }
        }
        let look = |p: &[u8]| -> Vec<Option<usize>> {
            wanted
                .iter()
                .map(|&i| {
                    let mut k = p.to_vec();
                    k.extend_from_slice(&ours[i].key);
                    by_key.get(k.as_slice()).copied()
                })
                .collect()
        };
        // The path that matches the most (the shortest of those).
        let mut best = (look(&[]), Vec::new());
        for p in prefixes.iter().skip(1) {
            let f = look(p);
            let n = |v: &[Option<usize>]| v.iter().filter(|x| x.is_some()).count();
            if n(&f) > n(&best.0) {
                best = (f, p.clone());
            }
        }
        how = if best.1.is_empty() {
            "by key".to_string()
        } else {
            format!("by key under {}", show(&best.1))
        };
        best.0
    };
    let missing: Vec<String> = wanted
        .iter()
        .zip(&found)
        .filter(|(_, f)| f.is_none())
        .map(|(&i, _)| show(&ours[i].key))
        .collect();
    if !missing.is_empty() {
        let more = if missing.len() > 10 {
            format!(" and {} more", missing.len() - 10)
        } else {
            String::new()
        };
        return Err(format!(
            "--variables-from {}: {} of {} variables have no match {how}: {}{more}",
            other.display(),
            missing.len(),
            wanted.len(),
            missing
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut used: HashMap<usize, usize> = HashMap::new();
    let mut pairs = Vec::with_capacity(wanted.len());
    for (&i, j) in wanted.iter().zip(found) {
        let Some(j) = j else { continue };
        if let Some(i0) = used.insert(j, i) {
            return Err(format!(
                "--variables-from {}: {} and {} both match its {}",
                other.display(),
                show(&ours[i0].key),
                show(&ours[i].key),
                show(&theirs[j].key)
            ));
        }
        let (a, b) = (ours[i], &theirs[j]);
        if a.dtype != b.dtype || a.shape != b.shape {
            return Err(format!(
                "--variables-from {}: {} is {} {:?}, its match {} is {} {:?}",
                other.display(),
                show(&a.key),
                a.dtype,
                a.shape,
                show(&b.key),
                b.dtype,
                b.shape
            ));
        }
        pairs.push((i, j));
    }
    Ok(pairs)
}

/// For `--to savedmodel`: every tensor of SOURCE's variables is restored by its graph under its
/// key, with its dtype and shape; an edit that changes any of that is refused, naming the
/// variable (the first; how many more).
fn graph_can_follow(plan: &[Planned], steps: &[Step]) -> Result<(), String> {
    let show = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    let mut why: Vec<String> = Vec::new();
    for s in steps {
        match s {
            Step::Drop(k) => why.push(format!(
                "{}: a variable the SavedModel's graph restores, left out by the edits",
                show(k)
            )),
            Step::Rename(a, b) => why.push(format!(
                "{}: a variable the SavedModel's graph restores by this key, renamed to {}",
                show(a),
                show(b)
            )),
            Step::Cast(..) | Step::Set(..) => {}
        }
    }
    for p in plan {
        match &p.was {
            None => why.push(format!(
                "{}: the SavedModel has no variable of this key to set",
                show(&p.key)
            )),
            Some((d, shape)) if *d != Some(p.dtype) || *shape != p.shape => why.push(format!(
                "{}: {} {:?} in the SavedModel's graph, made {} {:?}",
                p.shown(),
                d.map_or_else(|| "?".to_string(), |d| d.display_name()),
                shape,
                p.dtype.display_name(),
                p.shape
            )),
            Some(_) => {}
        }
    }
    match why.len() {
        0 => Ok(()),
        1 => Err(format!(
            "{}, which the graph cannot follow (--to tf writes a checkpoint)",
            why[0]
        )),
        n => Err(format!(
            "{}, which the graph cannot follow ({} more like it; --to tf writes a checkpoint)",
            why[0],
            n - 1
        )),
    }
}

/// SOURCE's object graph edited to follow the plan (`formats::v2::object_graph`), as a string
/// scalar's served bytes.
fn edited_object_graph(cks: &[Ckpt], plan: &[Planned], steps: &[Step]) -> Result<Vec<u8>, String> {
    use prost::Message;
    let what = String::from_utf8_lossy(OBJECT_GRAPH);
    let Some(From::Tensor(i, t)) = plan.iter().find(|p| p.is_object_graph()).map(|p| &p.from)
    else {
        return Err(format!("{what}: not found"));
    };
    let ck = &cks[*i];
    super::verify::check_tensor(ck, t).map_err(|e| format!("{what}: {e}"))?;
    let served = ck.served_size(t)?;
    let bytes = ck.read_served(t, 0, served as usize)?;
    let body = bytes
        .get(8..)
        .ok_or_else(|| format!("{what}: not a string scalar"))?;
    let g = crate::proto::TrackableObjectGraph::decode(body)
        .map_err(|e| format!("{what}: cannot be parsed: {e}"))?;
    let mut fate: std::collections::HashMap<String, Option<String>> = plan
        .iter()
        .filter_map(|p| {
            let o = p.orig.as_ref()?;
            Some((
                String::from_utf8_lossy(o).into_owned(),
                Some(String::from_utf8_lossy(&p.key).into_owned()),
            ))
        })
        .collect();
    for s in steps {
        if let Step::Drop(k) = s {
            fate.insert(String::from_utf8_lossy(k).into_owned(), None);
        }
    }
    let edited = crate::formats::v2::object_graph::edit(&g, &|k| fate.get(k).cloned())
        .map_err(|e| format!("{e} (the object graph cannot follow; --no-object-graph writes a name-keyed checkpoint without it)"))?;
    let body = edited.encode_to_vec();
    let mut out = (body.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    Ok(out)
}

/// Bytes of the planned tensor as read (its served bytes, or the `.npy` file's data).
fn served_size(cks: &[Ckpt], p: &Planned) -> Result<u64, String> {
    match &p.from {
        From::Tensor(i, t) => cks[*i].served_size(t),
        From::Npy { len, .. } => Ok(*len),
    }
}

/// Bytes written of a tensor of `served` bytes read: a cast one's size in its new dtype.
fn written_size(p: &Planned, served: u64) -> u64 {
    match (p.cast_from.and_then(DType::elem_size), p.dtype.elem_size()) {
        (Some(a), Some(b)) => served / a as u64 * b as u64,
        _ => served,
    }
}

/// Hands the bytes of `p` as read (`served` of them) to `sink`, in order: a tensor's served
/// bytes read in place from its checkpoint's mappings where the process can guard them (a page
/// lost to a file cut short is caught, not a crash), else copied; an `.npy` file's data with
/// `pread`. Where `--cast` converts the tensor, the bytes handed over are converted, and the
/// CRC-32C of the bytes read is returned (else `None`: the writer's CRC is theirs).
fn fill_from(
    cks: &[Ckpt],
    p: &Planned,
    served: u64,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
) -> Result<Option<u32>, String> {
    let mut src_crc = 0u32;
    let mut conv = Vec::new();
    let mut hand = |b: &[u8]| match p.cast_from {
        Some(from) => {
            src_crc = crc32c::crc32c_append(src_crc, b);
            conv.clear();
            super::cast::convert(from, p.dtype, b, &mut conv);
            sink(&conv)
        }
        None => sink(b),
    };
    let (ck, t) = match &p.from {
        From::Tensor(i, t) => (&cks[*i], t),
        From::Npy { path, offset, len } => {
            use std::os::unix::fs::FileExt;
            let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut buf = vec![0u8; CHUNK.min(*len as usize)];
            let mut at = 0u64;
            while at < *len {
                let n = ((*len - at) as usize).min(CHUNK);
                f.read_exact_at(&mut buf[..n], offset + at)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                hand(&buf[..n])?;
                at += n as u64;
            }
            return Ok(p.cast_from.map(|_| src_crc));
        }
    };
    let mut go = || {
        let mut at = 0u64;
        while at < served {
            let n = ((served - at) as usize).min(CHUNK);
            let mut err = None;
            let got = ck.read_served_with(t, at, n, |b| {
                if let Err(e) = hand(b) {
                    err = Some(e);
                }
                b.len()
            })?;
            if let Some(e) = err {
                return Err(e);
            }
            if got != n {
                return Err(format!("{got} bytes read at {at}, {n} expected"));
            }
            at += n as u64;
        }
        Ok(())
    };
    let r = if !super::open::mapped_reads() {
        go()
    } else {
        match super::open::mapped_scope(go) {
            (_, true) => Err("its file was cut short while it was read".into()),
            (r, false) => r,
        }
    };
    r.map(|()| p.cast_from.map(|_| src_crc))
}

/// Checks what was read of a tensor of a checkpoint (`crc`: the CRC-32C of its served bytes,
/// where known): against its stored CRC-32C where it is one stored piece whose bytes are its
/// served bytes (nothing read again), else by checking its stored pieces the way `verify` does
/// (a second read). An `.npy` file stores nothing to check by: its length was checked.
fn check_source(cks: &[Ckpt], p: &Planned, served: u64, crc: Option<u32>) -> Result<(), String> {
    let From::Tensor(i, t) = &p.from else {
        return Ok(());
    };
    let stored = match (t.partitioned, t.crc, t.nbytes == served) {
        (false, Some(c), true) => Some(c),
        _ => None,
    };
    if stored.is_none() || stored != crc {
        super::verify::check_tensor(&cks[*i], t).map_err(|e| {
            format!(
                "{}: {e} (a damaged source tensor is never copied)",
                String::from_utf8_lossy(&t.key)
            )
        })?;
    }
    Ok(())
}

/// Where the planned tensor's bytes lie as they are, with their stored CRC-32C, in a local file
/// (a whole V2 tensor of a fixed-size dtype, not cast): the file opened, its path, the offset
/// and the CRC. The writers have the kernel copy such bytes and read them back once, against
/// that CRC (the source and the copy checked in one pass).
fn copyable(cks: &[Ckpt], p: &Planned, served: u64) -> Option<(std::fs::File, PathBuf, u64, u32)> {
    if p.made.is_some() || p.cast_from.is_some() || p.dtype == DT_STRING || p.dtype == DT_VARIANT {
        return None;
    }
    let From::Tensor(i, t) = &p.from else {
        return None;
    };
    let crc = t.crc.filter(|_| !t.partitioned && t.nbytes == served)?;
    let (path, offset) = cks[*i].stored_in_local_file(t)?;
    let f = std::fs::File::open(&path).ok()?;
    Some((f, path, offset, crc))
}

/// Streams one tensor into the checkpoint being written, then checks its source
/// ([`check_source`]); or has the kernel copy it ([`copyable`]).
fn write_one(cks: &[Ckpt], p: &Planned, w: &mut BundleWriter) -> Result<(), String> {
    let show = p.shown();
    let refuse = |why: String| format!("{show}: {why}");
    if let Some(made) = &p.made {
        let mut read = |at: u64, len: usize| {
            let a = usize::try_from(at).map_err(|e| e.to_string())?;
            Ok(made
                .get(a..a.saturating_add(len).min(made.len()))
                .unwrap_or_default()
                .to_vec())
        };
        return w
            .add_strings(&p.key, &p.shape, made.len() as u64, &mut read)
            .map_err(&refuse);
    }
    let served = served_size(cks, p).map_err(&refuse)?;
    // A copied tensor's read-back runs beside the writing: its failure stops the export at the
    // next tensor, named by its own key.
    if let Some(e) = w.failed() {
        return Err(e);
    }
    if let Some((f, path, offset, stored)) = copyable(cks, p, served) {
        let copied = w
            .add_copied(
                &p.key,
                p.dtype,
                &p.shape,
                served,
                (&f, &path, offset),
                stored,
            )
            .map_err(&refuse)?;
        if copied {
            return Ok(());
        }
    }
    let crc = if p.dtype == DT_VARIANT {
        let From::Tensor(i, t) = &p.from else {
            return Err(refuse("a variant comes only from a V2 checkpoint".into()));
        };
        let Some(entry_crc) = t.crc.filter(|_| t.nbytes == served) else {
            return Err(refuse("a variant whose stored bytes are not served".into()));
        };
        w.add_stored(&p.key, p.dtype, &p.shape, served, entry_crc, |sink| {
            fill_from(cks, p, served, sink).map(|_| ())
        })
        .map_err(&refuse)?;
        // Its entry's CRC is not of its bytes: the source is checked as verify checks it.
        return super::verify::check_tensor(&cks[*i], t)
            .map_err(|e| format!("{show}: {e} (a damaged source tensor is never copied)"));
    } else if p.dtype == DT_STRING {
        let From::Tensor(i, t) = &p.from else {
            return Err(refuse("strings come only from a checkpoint".into()));
        };
        let ck = &cks[*i];
        let mut read = |at: u64, len: usize| ck.read_served(t, at, len);
        w.add_strings(&p.key, &p.shape, served, &mut read)
            .map_err(&refuse)?;
        None
    } else {
        let mut src_crc = None;
        let c = w
            .add(&p.key, p.dtype, &p.shape, |sink| {
                src_crc = fill_from(cks, p, served, sink)?;
                Ok(())
            })
            .map_err(&refuse)?;
        Some(src_crc.unwrap_or(c))
    };
    check_source(cks, p, served, crc)
}

/// Writes the plan as one `.safetensors` file at `out` (the layout of `model.safetensors`:
/// [`crate::parse::safetensors::Layout`], `__metadata__` naming the source); what it wrote.
fn write_safetensors(
    cks: &[Ckpt],
    source: &Path,
    plan: &[Planned],
    out: &Path,
    force: bool,
) -> Result<(u64, Vec<PathBuf>), String> {
    use crate::formats::safetensors_write::SafetensorsWriter;
    use crate::parse::safetensors::{Layout, TensorRecord};
    let mut sizes = Vec::with_capacity(plan.len());
    for p in plan {
        sizes.push(served_size(cks, p)?);
    }
    let written: Vec<u64> = plan
        .iter()
        .zip(&sizes)
        .map(|(p, &n)| written_size(p, n))
        .collect();
    let source_text = source.display().to_string();
    let layout = Layout::build_with_metadata(
        plan.iter().zip(&written).map(|(p, &nbytes)| TensorRecord {
            name: &p.key,
            dtype: p.dtype,
            shape: &p.shape,
            nbytes,
        }),
        &[("tfmount.source", &source_text)],
    )
    .map_err(|e| format!("{}: {e}", out.display()))?;
    let held: std::collections::HashSet<usize> = layout.tensors().map(|(i, _)| i).collect();
    if let Some(p) = (0..plan.len())
        .find(|i| !held.contains(i))
        .map(|i| &plan[i])
    {
        return Err(format!(
            "{}: cannot be held by safetensors (a key that is not UTF-8 or is __metadata__, or a size that is not its shape's)",
            String::from_utf8_lossy(&p.key)
        ));
    }
    let mut w = SafetensorsWriter::create(out, layout.header().to_vec(), force)?;
    for (i, range) in layout.tensors() {
        let p = &plan[i];
        let show = p.shown();
        let served = sizes[i];
        if let Some(e) = w.failed() {
            return Err(e);
        }
        if let Some((f, path, offset, stored)) = copyable(cks, p, served) {
            let copied = w
                .add_copied(&show, range.end - range.start, (&f, &path, offset), stored)
                .map_err(|e| format!("{show}: {e}"))?;
            if copied {
                continue;
            }
        }
        let mut src_crc = None;
        let crc = w
            .add(range.end - range.start, |sink| {
                src_crc = fill_from(cks, p, served, sink)?;
                Ok(())
            })
            .map_err(|e| format!("{show}: {e}"))?;
        check_source(cks, p, served, Some(src_crc.unwrap_or(crc)))?;
    }
    let (bytes, path) = w.finish()?;
    Ok((bytes, vec![path]))
}
