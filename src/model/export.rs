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
use crate::formats::v2::write::BundleWriter;
use crate::parse::dtype::{DType, DT_STRING};

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
}

impl To {
    pub(crate) fn name(self) -> &'static str {
        match self {
            To::Tf => "tf",
            To::Safetensors => "safetensors",
        }
    }

    /// What OUT's name asks for when `--to` is not given: `.safetensors` for a file ending so,
    /// else a TF checkpoint.
    pub(crate) fn of(out: &Path) -> To {
        if out
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"))
        {
            To::Safetensors
        } else {
            To::Tf
        }
    }
}

/// A glob over keys: `*` and `?` within a path component (not `/`), `**` across components;
/// anything else stands for itself. It matches a whole key.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    re: Regex,
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
        Ok(Glob { re })
    }

    pub(crate) fn matches(&self, key: &[u8]) -> bool {
        self.re.is_match(key)
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
}

impl Edit {
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
    pub(crate) to: To,
    /// Bytes per data file at most (`None`: one).
    pub(crate) shard_size: Option<u64>,
    pub(crate) force: bool,
    pub(crate) dry_run: bool,
    /// Leave a TF2 checkpoint's object graph out (a name-keyed checkpoint).
    pub(crate) no_object_graph: bool,
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
        }
    }
}

/// One tensor to write.
struct Planned {
    src: TensorInfo,
    key: Vec<u8>,
    dtype: DType,
    /// Its served bytes made here, not read from the source (an edited object graph).
    made: Option<Vec<u8>>,
    /// The source's dtype, where `--cast` converts it to `dtype`.
    cast_from: Option<DType>,
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
    let ck = super::open::one_checkpoint(source)?;
    let Plan {
        tensors: plan,
        steps,
        object_graph,
    } = plan(&ck, opts)?;
    for s in &steps {
        step(s);
    }
    let dropped = steps.iter().filter(|s| matches!(s, Step::Drop(_))).count() as u64;
    let renamed = steps
        .iter()
        .filter(|s| matches!(s, Step::Rename(..)))
        .count() as u64;
    let edited = dropped > 0 || renamed > 0;
    let mut plan = plan;
    if let Some(og) = object_graph {
        if opts.to == To::Safetensors {
            // The checkpoint's structure, not a weight: left out without complaint.
            plan.retain(|p| p.src.key != og);
        } else if opts.no_object_graph {
            plan.retain(|p| p.src.key != og);
        } else if edited {
            let made = edited_object_graph(&ck, &plan, &steps)?;
            if let Some(p) = plan.iter_mut().find(|p| p.src.key == og) {
                p.made = Some(made);
            }
        }
    }
    let mut summary = Summary {
        out: out.to_path_buf(),
        to: opts.to,
        tensors: plan.len() as u64,
        bytes: 0,
        dropped,
        renamed,
        files: Vec::new(),
        dry_run: opts.dry_run,
    };
    if opts.dry_run {
        for p in &plan {
            summary.bytes += ck.served_size(&p.src).unwrap_or(0);
        }
        return Ok(summary);
    }
    match opts.to {
        To::Tf => {
            let mut w = BundleWriter::create(out, opts.shard_size, opts.force)?;
            // The tensors in the order they are stored (as TensorFlow writes in `Add` order):
            // by key.
            for p in &plan {
                write_one(&ck, p, &mut w)?;
            }
            let wrote = w.finish()?;
            summary.bytes = wrote.bytes;
            summary.files = wrote.files;
        }
        To::Safetensors => {
            for p in &plan {
                if crate::parse::safetensors::safetensors_dtype(p.dtype).is_none() {
                    let k = String::from_utf8_lossy(&p.src.key);
                    return Err(format!(
                        "{k}: its dtype, {}, is one safetensors cannot hold (--drop '{}' leaves it out)",
                        p.src.dtype,
                        k.replace('\'', "'\\''")
                    ));
                }
            }
            let (bytes, files) = write_safetensors(&ck, source, &plan, out, opts.force)?;
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
    /// The key of the source's object graph, if it has one and it is kept.
    object_graph: Option<Vec<u8>>,
}

fn plan(ck: &Ckpt, opts: &Options) -> Result<Plan, String> {
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
    // Each tensor's current key, or None once dropped, and its dtype after the casts so far.
    let mut keys: Vec<Option<Vec<u8>>> = all.iter().map(|t| Some(t.key.clone())).collect();
    let mut dtypes: Vec<Option<DType>> = all.iter().map(|t| DType::from_name(&t.dtype)).collect();
    for e in &opts.edits {
        for (k, d) in keys.iter_mut().zip(dtypes.iter_mut()) {
            let Some(key) = k.as_ref() else { continue };
            if let Edit::Cast { to, glob } = e {
                let chosen = glob.as_ref().is_none_or(|g| g.matches(key));
                if chosen && d.is_some_and(super::cast::castable) {
                    *d = Some(*to);
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
                Edit::Rename { .. } | Edit::Cast { .. } => true,
            };
            if !keep {
                *k = None;
                continue;
            }
            if let Edit::Rename { re, to, .. } = e {
                let new = re.replace(key, to.as_bytes()).into_owned();
                *k = Some(new);
            }
        }
    }
    let mut steps = Vec::new();
    let mut plan = Vec::new();
    let mut object_graph = None;
    let mut seen: std::collections::HashMap<Vec<u8>, Vec<u8>> = std::collections::HashMap::new();
    for ((t, k), cast_to) in all.into_iter().zip(keys).zip(dtypes) {
        let Some(key) = k else {
            steps.push(Step::Drop(t.key.clone()));
            continue;
        };
        if key.is_empty() {
            return Err(format!(
                "{}: renamed to an empty key",
                String::from_utf8_lossy(&t.key)
            ));
        }
        if let Some(other) = seen.insert(key.clone(), t.key.clone()) {
            return Err(format!(
                "{} and {} would both be written as {}",
                String::from_utf8_lossy(&other),
                String::from_utf8_lossy(&t.key),
                String::from_utf8_lossy(&key)
            ));
        }
        if key != t.key {
            steps.push(Step::Rename(t.key.clone(), key.clone()));
        }
        if t.key == OBJECT_GRAPH && key == OBJECT_GRAPH {
            object_graph = Some(key.clone());
        }
        let dtype = DType::from_name(&t.dtype)
            .filter(|d| *d == DT_STRING || d.elem_size().is_some())
            .ok_or_else(|| {
                let k = String::from_utf8_lossy(&t.key);
                format!(
                    "{k}: its dtype, {}, is one export cannot write (--drop '{}' leaves it out)",
                    t.dtype,
                    k.replace('\'', "'\\''")
                )
            })?;
        let cast_from = cast_to.filter(|c| *c != dtype).map(|c| {
            steps.push(Step::Cast(key.clone(), dtype, c));
            dtype
        });
        plan.push(Planned {
            src: t,
            key,
            dtype: cast_to.unwrap_or(dtype),
            made: None,
            cast_from,
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

/// The source's object graph edited to follow the plan (`formats::v2::object_graph`), as a
/// string scalar's served bytes.
fn edited_object_graph(ck: &Ckpt, plan: &[Planned], steps: &[Step]) -> Result<Vec<u8>, String> {
    use prost::Message;
    let og = plan
        .iter()
        .find(|p| p.src.key == OBJECT_GRAPH)
        .ok_or("no object graph")?;
    let what = String::from_utf8_lossy(OBJECT_GRAPH);
    super::verify::check_tensor(ck, &og.src).map_err(|e| format!("{what}: {e}"))?;
    let served = ck.served_size(&og.src)?;
    let bytes = ck.read_served(&og.src, 0, served as usize)?;
    let body = bytes
        .get(8..)
        .ok_or_else(|| format!("{what}: not a string scalar"))?;
    let g = crate::proto::TrackableObjectGraph::decode(body)
        .map_err(|e| format!("{what}: cannot be parsed: {e}"))?;
    let mut fate: std::collections::HashMap<String, Option<String>> = plan
        .iter()
        .map(|p| {
            (
                String::from_utf8_lossy(&p.src.key).into_owned(),
                Some(String::from_utf8_lossy(&p.key).into_owned()),
            )
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

/// Hands the served bytes of `p`'s source tensor (`served` of them) to `sink`, in order: read
/// in place from the source's mappings where the process can guard them (a page lost to a file
/// cut short is caught, not a crash), else copied.
/// Where `--cast` converts the tensor, the bytes handed over are converted, and the CRC-32C of
/// the source's bytes is returned (else `None`: the writer's CRC is the source's).
fn fill_from(
    ck: &Ckpt,
    p: &Planned,
    served: u64,
    sink: &mut dyn FnMut(&[u8]) -> Result<(), String>,
) -> Result<Option<u32>, String> {
    let mut src_crc = 0u32;
    let mut conv = Vec::new();
    let mut go = || {
        let mut at = 0u64;
        while at < served {
            let n = ((served - at) as usize).min(CHUNK);
            let mut err = None;
            let got = ck.read_served_with(&p.src, at, n, |b| {
                let r = match p.cast_from {
                    Some(from) => {
                        src_crc = crc32c::crc32c_append(src_crc, b);
                        conv.clear();
                        super::cast::convert(from, p.dtype, b, &mut conv);
                        sink(&conv)
                    }
                    None => sink(b),
                };
                if let Err(e) = r {
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

/// Checks what was read of `p`'s source tensor (`crc`: the CRC-32C of its served bytes, where
/// known): against its stored CRC-32C where it is one stored piece whose bytes are its served
/// bytes (nothing read again), else by checking its stored pieces the way `verify` does (a
/// second read).
fn check_source(ck: &Ckpt, p: &Planned, served: u64, crc: Option<u32>) -> Result<(), String> {
    let stored = match (p.src.partitioned, p.src.crc, p.src.nbytes == served) {
        (false, Some(c), true) => Some(c),
        _ => None,
    };
    if stored.is_none() || stored != crc {
        super::verify::check_tensor(ck, &p.src).map_err(|e| {
            format!(
                "{}: {e} (a damaged source tensor is never copied)",
                String::from_utf8_lossy(&p.src.key)
            )
        })?;
    }
    Ok(())
}

/// Streams one tensor from the source into the checkpoint being written, then checks the
/// source ([`check_source`]).
fn write_one(ck: &Ckpt, p: &Planned, w: &mut BundleWriter) -> Result<(), String> {
    let show = String::from_utf8_lossy(&p.src.key).into_owned();
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
            .add_strings(&p.key, &p.src.shape, made.len() as u64, &mut read)
            .map_err(&refuse);
    }
    let served = ck.served_size(&p.src).map_err(&refuse)?;
    let crc = if p.dtype == DT_STRING {
        let mut read = |at: u64, len: usize| ck.read_served(&p.src, at, len);
        w.add_strings(&p.key, &p.src.shape, served, &mut read)
            .map_err(&refuse)?;
        None
    } else {
        let mut src_crc = None;
        let c = w
            .add(&p.key, p.dtype, &p.src.shape, |sink| {
                src_crc = fill_from(ck, p, served, sink)?;
                Ok(())
            })
            .map_err(&refuse)?;
        Some(src_crc.unwrap_or(c))
    };
    check_source(ck, p, served, crc)
}

/// Writes the plan as one `.safetensors` file at `out` (the layout of `model.safetensors`:
/// [`crate::parse::safetensors::Layout`], `__metadata__` naming the source); what it wrote.
fn write_safetensors(
    ck: &Ckpt,
    source: &Path,
    plan: &[Planned],
    out: &Path,
    force: bool,
) -> Result<(u64, Vec<PathBuf>), String> {
    use crate::formats::safetensors_write::SafetensorsWriter;
    use crate::parse::safetensors::{Layout, TensorRecord};
    let mut sizes = Vec::with_capacity(plan.len());
    for p in plan {
        sizes.push(ck.served_size(&p.src)?);
    }
    // What is written: a cast tensor's size in its new dtype.
    let written: Vec<u64> = plan
        .iter()
        .zip(&sizes)
        .map(
            |(p, &n)| match (p.cast_from.and_then(DType::elem_size), p.dtype.elem_size()) {
                (Some(a), Some(b)) => n / a as u64 * b as u64,
                _ => n,
            },
        )
        .collect();
    let source_text = source.display().to_string();
    let layout = Layout::build_with_metadata(
        plan.iter().zip(&written).map(|(p, &nbytes)| TensorRecord {
            name: &p.key,
            dtype: p.dtype,
            shape: &p.src.shape,
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
        let show = String::from_utf8_lossy(&p.src.key).into_owned();
        let served = sizes[i];
        debug_assert_eq!(range.end - range.start, served);
        let mut src_crc = None;
        let crc = w
            .add(range.end - range.start, |sink| {
                src_crc = fill_from(ck, p, served, sink)?;
                Ok(())
            })
            .map_err(|e| format!("{show}: {e}"))?;
        check_source(ck, p, served, Some(src_crc.unwrap_or(crc)))?;
    }
    let (bytes, path) = w.finish()?;
    Ok((bytes, vec![path]))
}
