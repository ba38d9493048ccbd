//! `tfmount diff A B`: the tensors that differ between two checkpoints, sorted by key, decided
//! from the indexes where they can decide (same dtype, shape, size and stored CRC-32C means
//! equal; a different CRC means different bytes), by reading bytes where they cannot
//! (partitioned tensors sliced differently, a stored CRC missing: every V1 tensor) or with
//! `--exact`.
//!
//! Both indexes are walked once, side by side, in key order.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::iter::Peekable;
use std::path::Path;
use std::time::Instant;

use super::{closed, escape, Lines, Val};
use crate::cli::DiffArgs;
use crate::cmd::model::{one_checkpoint, Ckpt, Item, TensorInfo, Walk};

/// Bytes compared at a time when the bytes decide.
const CHUNK: usize = 4 << 20;

pub fn run(args: &DiffArgs) -> i32 {
    let start = Instant::now();
    let open =
        |p: &std::path::Path| one_checkpoint(p).inspect_err(|e| eprintln!("tfmount diff: {e}"));
    let (Ok(a), Ok(b)) = (open(&args.a), open(&args.b)) else {
        return 2;
    };
    if args.names {
        for (side, ck) in [("A", &a), ("B", &b)] {
            if let Err(e) = named(ck) {
                eprintln!("tfmount diff: {side} ({}): {e}", ck.prefix().display());
                return 2;
            }
        }
    }
    let mut d = Diff::new(&a, &b, args.exact, args.same, Lines::to_stdout(args.json));
    d.by_name = args.names;
    if args.values || args.atol.is_some() || args.rtol.is_some() {
        d.values = Some(Tolerance {
            atol: args.atol.unwrap_or(0.0),
            rtol: args.rtol.unwrap_or(0.0),
        });
    }
    d.walk();
    let summary = if d.out.json() && !d.closed {
        let s = &d.stats;
        let n = |v: u64| Val::Num(Some(v));
        d.out.record(
            "summary",
            &[
                ("tensors_a", n(s.in_a)),
                ("tensors_b", n(s.in_b)),
                ("added", n(s.added)),
                ("deleted", n(s.deleted)),
                ("type_changed", n(s.typed)),
                ("modified", n(s.modified)),
                ("equal", n(s.equal)),
                ("decided_by_index", n(s.by_index)),
                ("decided_by_bytes", n(s.by_bytes)),
                (
                    "data_bytes_read",
                    n(a.data_bytes_read() + b.data_bytes_read()),
                ),
            ],
        )
    } else {
        Ok(())
    };
    if let Err(e) = summary.and_then(|()| d.out.flush()) {
        if !closed(&e) {
            eprintln!("tfmount diff: stdout: {e}");
            d.trouble = true;
        }
    }
    if args.stats {
        let s = &d.stats;
        eprintln!(
            "diff: A {} tensors, B {} tensors; added {}, deleted {}, type {}, modified {}, equal {}; \
decided by index {}, by bytes {}; data bytes read {} (A {}, B {}); {:.3} s; \
process read {} bytes in all (rchar: indexes included)",
            s.in_a,
            s.in_b,
            s.added,
            s.deleted,
            s.typed,
            s.modified,
            s.equal,
            s.by_index,
            s.by_bytes,
            a.data_bytes_read() + b.data_bytes_read(),
            a.data_bytes_read(),
            b.data_bytes_read(),
            start.elapsed().as_secs_f64(),
            rchar().map_or("?".to_string(), |n| n.to_string())
        );
    }
    if d.trouble {
        2
    } else {
        i32::from(d.differ)
    }
}

/// One line of `tfmount diff A B`: its status (`A`, `D`, `T`, `M`, `=`) and the key, unescaped.
pub type Line = (String, Vec<u8>);

/// What `tfmount diff A B` prints (with `--exact` and `--same` as asked), as `(status, key)`;
/// `Err` with the messages `diff` prints when A or B cannot be used or a tensor of them cannot
/// be read (one per line).
pub fn lines(
    a: &Path,
    b: &Path,
    exact: bool,
    same: bool,
    names: bool,
) -> Result<Vec<Line>, String> {
    let (a, b) = (one_checkpoint(a)?, one_checkpoint(b)?);
    if names {
        for (side, ck) in [("A", &a), ("B", &b)] {
            named(ck).map_err(|e| format!("{side} ({}): {e}", ck.prefix().display()))?;
        }
    }
    let mut d = Diff::new(&a, &b, exact, same, Lines::kept());
    d.by_name = names;
    d.walk();
    if !d.troubles.is_empty() {
        return Err(d.troubles.join("\n"));
    }
    Ok(d.out
        .into_pairs()
        .into_iter()
        .map(|(tag, key)| (String::from_utf8_lossy(&tag).into_owned(), key))
        .collect())
}

/// Bytes this process has read with read(2) and friends (`rchar` of /proc/self/io): a check of
/// the data-byte count that does not depend on it.
fn rchar() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/io").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|n| n.trim().parse().ok())
}

#[derive(Default)]
struct Stats {
    in_a: u64,
    in_b: u64,
    added: u64,
    deleted: u64,
    typed: u64,
    modified: u64,
    equal: u64,
    by_index: u64,
    by_bytes: u64,
}

struct Diff<'c> {
    a: &'c Ckpt,
    b: &'c Ckpt,
    exact: bool,
    same: bool,
    out: Lines,
    /// What went wrong, in the words printed (kept for [`lines`]).
    troubles: Vec<String>,
    stats: Stats,
    trouble: bool,
    differ: bool,
    closed: bool,
    /// `--values` (with `--atol`, `--rtol`): how much a changed tensor's values changed.
    values: Option<Tolerance>,
    /// `--names`: tensors matched by their `names/` names, not keys.
    by_name: bool,
    /// With `--names`, the key each name stands for, per side (`[A, B]`): what a dequantized
    /// tensor is found by.
    keys: [HashMap<Vec<u8>, Vec<u8>>; 2],
    /// With `--values`, each side's dequantized tensors by key (made when first needed).
    dequantized: [Option<HashMap<Vec<u8>, TensorInfo>>; 2],
}

/// Why a checkpoint cannot be compared by names: it has no `names/`, or no tensor has a name.
fn named(ck: &Ckpt) -> Result<(), String> {
    match ck.names() {
        None => {
            Err("has no names/ to match tensors by (diff without --names compares keys)".into())
        }
        Some([]) => Err("names/ is empty: no tensor has a name to match by".into()),
        Some(_) => Ok(()),
    }
}

/// What `--values` calls equal: `|a - b| <= atol + rtol * |b|` (numpy's `isclose`, B the
/// reference; NaN equals NaN).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

/// How much the values of a tensor changed (`--values`): element by element as numbers (f64;
/// complex by modulus; bool as 0 and 1).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ValueDiff {
    pub elements: u64,
    /// Elements not equal within the tolerance (a NaN on one side only included).
    pub differing: u64,
    /// The first of them, as a flat (row-major) index.
    pub first: Option<u64>,
    /// Largest `|a - b|` over the elements where it is a number.
    pub max_abs: f64,
    /// Largest `|a - b| / |b|` over those where `b != 0`.
    pub max_rel: f64,
    sum_sq: f64,
    counted: u64,
}

impl ValueDiff {
    /// Adds element `i`, `(a, b)` as (real, imaginary) parts.
    fn add(&mut self, i: u64, a: (f64, f64), b: (f64, f64), tol: Tolerance) {
        self.elements += 1;
        let nan_a = a.0.is_nan() || a.1.is_nan();
        let nan_b = b.0.is_nan() || b.1.is_nan();
        let d = if nan_a || nan_b {
            if nan_a && nan_b {
                return;
            }
            f64::NAN
        } else if a == b {
            0.0
        } else {
            (a.0 - b.0).hypot(a.1 - b.1)
        };
        let mb = b.0.hypot(b.1);
        if !d.is_nan() {
            self.max_abs = self.max_abs.max(d);
            self.sum_sq += d * d;
            self.counted += 1;
            if mb != 0.0 && d != 0.0 {
                self.max_rel = self.max_rel.max(d / mb);
            }
        }
        if d.is_nan() || d > tol.atol + tol.rtol * mb {
            self.differing += 1;
            self.first.get_or_insert(i);
        }
    }

    /// Adds what `other` found in the elements after this one's (its indices already absolute).
    fn merge(&mut self, other: &ValueDiff) {
        self.elements += other.elements;
        self.differing += other.differing;
        self.first = match (self.first, other.first) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        };
        self.max_abs = self.max_abs.max(other.max_abs);
        self.max_rel = self.max_rel.max(other.max_rel);
        self.sum_sq += other.sum_sq;
        self.counted += other.counted;
    }

    /// The float32 elements of `a` and `b` (as stored, little-endian), the first at index
    /// `base`: [`ValueDiff::add`]'s arithmetic in a loop the compiler keeps tight (the rare NaN
    /// goes through `add`).
    fn f32_block(a: &[u8], b: &[u8], base: u64, tol: Tolerance) -> ValueDiff {
        let mut v = ValueDiff::default();
        let (mut max_abs, mut max_rel, mut sum_sq) = (0f64, 0f64, 0f64);
        let (mut counted, mut differing) = (0u64, 0u64);
        let mut first: Option<u64> = None;
        for (i, (p, q)) in a.chunks_exact(4).zip(b.chunks_exact(4)).enumerate() {
            let x = f64::from(f32::from_le_bytes([p[0], p[1], p[2], p[3]]));
            let y = f64::from(f32::from_le_bytes([q[0], q[1], q[2], q[3]]));
            let d = (x - y).abs();
            if d.is_nan() {
                // A NaN, or inf against inf: the general rules, into `v`.
                v.add(base + i as u64, (x, 0.0), (y, 0.0), tol);
                continue;
            }
            let mb = y.abs();
            max_abs = max_abs.max(d);
            sum_sq += d * d;
            counted += 1;
            if mb != 0.0 && d != 0.0 {
                max_rel = max_rel.max(d / mb);
            }
            if d > tol.atol + tol.rtol * mb {
                differing += 1;
                if first.is_none() {
                    first = Some(base + i as u64);
                }
            }
        }
        // Every element this loop kept is counted once; `v` counted the others.
        v.merge(&ValueDiff {
            elements: counted,
            differing,
            first,
            max_abs,
            max_rel,
            sum_sq,
            counted,
        });
        v
    }

    /// Root mean square of `a - b` over the elements where it is a number.
    pub fn rms(&self) -> f64 {
        if self.counted == 0 {
            0.0
        } else {
            (self.sum_sq / self.counted as f64).sqrt()
        }
    }
}

/// An element as (real, imaginary) parts (strings never get here: `value_diff` skips them).
fn parts(v: crate::render::elem::Value) -> (f64, f64) {
    use crate::render::elem::Value as V;
    match v {
        V::Bool(b) => (f64::from(u8::from(b)), 0.0),
        V::Int(i) => (i as f64, 0.0),
        V::F32(x) => (f64::from(x), 0.0),
        V::F64(x) => (x, 0.0),
        V::C64(r, i) => (f64::from(r), f64::from(i)),
        V::C128(r, i) => (r, i),
    }
}

/// A flat index as the index along each dimension of `shape`: `3,1`.
fn unravel(mut i: u64, shape: &[u64]) -> String {
    let mut idx = vec![0u64; shape.len()];
    for (k, &d) in shape.iter().enumerate().rev() {
        if d > 0 {
            idx[k] = i % d;
            i /= d;
        }
    }
    idx.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// The key of a walk's next item that has one (tensors and unreadable entries).
fn key_of(item: &Item) -> Option<&[u8]> {
    match item {
        Item::Tensor(t) => Some(&t.key),
        Item::BadEntry { key, .. } => Some(key),
        Item::BadBlock { .. } | Item::MissingShard { .. } => None,
    }
}

impl<'c> Diff<'c> {
    fn new(a: &'c Ckpt, b: &'c Ckpt, exact: bool, same: bool, out: Lines) -> Diff<'c> {
        Diff {
            a,
            b,
            exact,
            same,
            out,
            troubles: Vec::new(),
            stats: Stats::default(),
            trouble: false,
            differ: false,
            closed: false,
            values: None,
            by_name: false,
            keys: Default::default(),
            dequantized: Default::default(),
        }
    }

    /// The line of a changed tensor with how much its values changed (`--values`).
    fn value_line(&mut self, tag: &[u8], key: &[u8], shape: &[u64], v: &ValueDiff) {
        self.differ = true;
        if self.closed {
            return;
        }
        let first = v.first.map(|i| unravel(i, shape)).unwrap_or_default();
        let n = |x: u64| Val::Num(Some(x));
        let fields = [
            ("change", Val::Bytes(tag)),
            ("key", Val::Bytes(key)),
            ("max_abs", Val::Float(v.max_abs)),
            ("max_rel", Val::Float(v.max_rel)),
            ("rms", Val::Float(v.rms())),
            ("differing", n(v.differing)),
            ("elements", n(v.elements)),
            ("first_index", Val::Bytes(first.as_bytes())),
        ];
        self.emit(&fields);
    }

    /// Compares two tensors of the same dtype and shape value by value; `Ok(None)` for a dtype
    /// without numbers (strings, variants).
    fn value_diff(
        (a, ta): (&Ckpt, &TensorInfo),
        (b, tb): (&Ckpt, &TensorInfo),
        tol: Tolerance,
    ) -> Result<Option<ValueDiff>, (Side, String)> {
        use crate::render::elem::Kind;
        let Some(kind) = crate::parse::dtype::DType::from_name(&ta.dtype).and_then(Kind::of) else {
            return Ok(None);
        };
        let es = kind.size();
        if es == 0 {
            return Ok(None);
        }
        let na = a.served_size(ta).map_err(|e| (Side::A, e))?;
        let nb = b.served_size(tb).map_err(|e| (Side::B, e))?;
        let n = na.min(nb) / es as u64 * es as u64;
        let chunk = (CHUNK / es * es) as u64;
        let mut v = ValueDiff::default();
        let mut off = 0u64;
        let mut i = 0u64;
        while off < n {
            let len = (n - off).min(chunk) as usize;
            let x = a.read_served(ta, off, len).map_err(|e| (Side::A, e))?;
            let y = b.read_served(tb, off, len).map_err(|e| (Side::B, e))?;
            if kind == Kind::F32 {
                // Both halves of the piece at once, on two threads.
                let half = len / 8 * 4;
                let (x0, x1) = x.split_at(half);
                let (y0, y1) = y.split_at(half);
                let (p0, p1) = std::thread::scope(|sc| {
                    let h = sc.spawn(|| ValueDiff::f32_block(x1, y1, i + (half / 4) as u64, tol));
                    let p0 = ValueDiff::f32_block(x0, y0, i, tol);
                    (p0, h.join())
                });
                v.merge(&p0);
                match p1 {
                    Ok(p1) => v.merge(&p1),
                    Err(_) => return Err((Side::A, "a comparing thread failed".into())),
                }
                i += (len / 4) as u64;
            } else {
                for (p, q) in x.chunks_exact(es).zip(y.chunks_exact(es)) {
                    v.add(i, parts(kind.decode(p)), parts(kind.decode(q)), tol);
                    i += 1;
                }
            }
            off += len as u64;
        }
        Ok(Some(v))
    }

    fn line(&mut self, tag: &[u8], key: &[u8]) {
        if tag != b"=" {
            self.differ = true;
        }
        if self.closed {
            return;
        }
        self.emit(&[("change", Val::Bytes(tag)), ("key", Val::Bytes(key))]);
    }

    /// Writes one `change` record; a failed write is trouble, a closed stdout ends the output.
    fn emit(&mut self, fields: &[(&str, Val<'_>)]) {
        if let Err(e) = self.out.record("change", fields) {
            if !closed(&e) {
                eprintln!("tfmount diff: stdout: {e}");
                self.trouble = true;
            }
            self.closed = true;
        }
    }

    /// Trouble with the checkpoint on `side`, named by its path.
    fn trouble_on(&mut self, side: Side, what: &str) {
        match side {
            Side::A => self.trouble("A", self.a, what),
            Side::B => self.trouble("B", self.b, what),
        }
    }

    fn trouble(&mut self, side: &str, ck: &Ckpt, what: &str) {
        let line = format!("{side} ({}): {what}", ck.prefix().display());
        if self.out.keeps() {
            self.troubles.push(line);
        } else {
            eprintln!("tfmount diff: {line}");
        }
        self.trouble = true;
    }

    /// Takes the next item of `w`, reporting unreadable blocks and missing V1 shards (which
    /// hold no known key) as trouble, until one with a key.
    fn skip_blocks(&mut self, w: &mut Peekable<Walk<'c>>, side: &str, ck: &'c Ckpt) {
        while let Some(item) = w.peek() {
            if key_of(item).is_some() {
                return;
            }
            match w.next() {
                Some(Item::BadBlock {
                    block,
                    blocks,
                    reason,
                    ..
                }) => self.trouble(
                    side,
                    ck,
                    &format!("index block {}/{blocks} unreadable: {reason}", block + 1),
                ),
                Some(Item::MissingShard { file, .. }) => self.trouble(
                    side,
                    ck,
                    &format!("checkpoint file {} is missing", file.display()),
                ),
                _ => {}
            }
        }
    }

    fn walk(&mut self) {
        let (wa, wb) = if self.by_name {
            let wa = self.named_walk(Side::A);
            (wa, self.named_walk(Side::B))
        } else {
            (self.a.walk(), self.b.walk())
        };
        let (mut wa, mut wb) = (wa.peekable(), wb.peekable());
        loop {
            self.skip_blocks(&mut wa, "A", self.a);
            self.skip_blocks(&mut wb, "B", self.b);
            let order = match (wa.peek().and_then(key_of), wb.peek().and_then(key_of)) {
                (None, None) => return,
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (Some(x), Some(y)) => x.cmp(y),
            };
            let (ia, ib) = match order {
                Ordering::Less => (wa.next(), None),
                Ordering::Greater => (None, wb.next()),
                Ordering::Equal => (wa.next(), wb.next()),
            };
            self.pair(ia, ib);
            if self.closed {
                return;
            }
        }
    }

    /// The walk of a side by `names/` names: its tensors under each name that names them (a
    /// tensor with two names twice; one without a name not at all), sorted by name, after the
    /// blocks and files it cannot read. Entries it cannot read are trouble now.
    fn named_walk(&mut self, side: Side) -> Walk<'c> {
        let ck = self.ck(side);
        let mut first = Vec::new();
        let mut by_key: HashMap<Vec<u8>, TensorInfo> = HashMap::new();
        for item in ck.walk() {
            match item {
                Item::Tensor(t) => {
                    by_key.insert(t.key.clone(), t);
                }
                Item::BadEntry { key, reason } => {
                    self.trouble_on(side, &format!("{}: {reason}", show(&key)));
                }
                other => first.push(other),
            }
        }
        let mut named: Vec<TensorInfo> = ck
            .names()
            .unwrap_or_default()
            .iter()
            .filter_map(|(name, key)| {
                let mut t = by_key.get(key.as_bytes())?.clone();
                t.key = name.as_bytes().to_vec();
                Some(t)
            })
            .collect();
        named.sort_by(|x, y| x.key.cmp(&y.key));
        named.dedup_by(|x, y| x.key == y.key);
        let keys = &mut self.keys[side as usize];
        for (name, key) in ck.names().unwrap_or_default() {
            keys.entry(name.as_bytes().to_vec())
                .or_insert_with(|| key.as_bytes().to_vec());
        }
        Box::new(first.into_iter().chain(named.into_iter().map(Item::Tensor)))
    }

    fn ck(&self, side: Side) -> &'c Ckpt {
        match side {
            Side::A => self.a,
            Side::B => self.b,
        }
    }

    /// What `--values` compares of tensor `t` of `side`: its dequantized float32 values where
    /// the model has them (a quantized TFLite constant), else `None`.
    fn dequantized_of(&mut self, side: Side, t: &TensorInfo) -> Option<(&'c Ckpt, TensorInfo)> {
        let d = self.ck(side).dequantized()?;
        let map = self.dequantized[side as usize].get_or_insert_with(|| {
            d.walk()
                .filter_map(|i| match i {
                    Item::Tensor(t) => Some((t.key.clone(), t)),
                    _ => None,
                })
                .collect()
        });
        let key = match self.keys[side as usize].get(&t.key) {
            Some(k) if self.by_name => k.as_slice(),
            _ => t.key.as_slice(),
        };
        map.get(key).map(|e| (d, e.clone()))
    }

    /// With `--values`, a tensor whose dtype or shape differs but of which one side (or both)
    /// is quantized and has dequantized values of the other's dtype and shape: compared by
    /// those values. `None` when there is nothing such to compare.
    fn dequantized_pair(&mut self, ta: &TensorInfo, tb: &TensorInfo, tol: Tolerance) -> Option<()> {
        let da = self.dequantized_of(Side::A, ta);
        let db = self.dequantized_of(Side::B, tb);
        if da.is_none() && db.is_none() {
            return None;
        }
        let (ca, ea) = da.unwrap_or((self.a, ta.clone()));
        let (cb, eb) = db.unwrap_or((self.b, tb.clone()));
        if ea.dtype != eb.dtype || ea.shape != eb.shape {
            return None;
        }
        match Self::value_diff((ca, &ea), (cb, &eb), tol) {
            Ok(Some(v)) if v.differing == 0 => {
                self.stats.equal += 1;
                if self.same {
                    self.line(b"=", &ta.key);
                }
            }
            Ok(Some(v)) => {
                self.stats.typed += 1;
                self.value_line(b"T", &ta.key, &ta.shape, &v);
            }
            Ok(None) => return None,
            Err((side, e)) => self.trouble_on(side, &format!("{}: {e}", show(&ta.key))),
        }
        Some(())
    }

    fn pair(&mut self, ia: Option<Item>, ib: Option<Item>) {
        let (ta, tb) = match (ia, ib) {
            (Some(Item::BadEntry { key, reason }), _) => {
                let what = format!("{}: {reason}", show(&key));
                return self.trouble("A", self.a, &what);
            }
            (_, Some(Item::BadEntry { key, reason })) => {
                let what = format!("{}: {reason}", show(&key));
                return self.trouble("B", self.b, &what);
            }
            (Some(Item::Tensor(t)), None) => {
                self.stats.in_a += 1;
                self.stats.deleted += 1;
                return self.line(b"D", &t.key);
            }
            (None, Some(Item::Tensor(t))) => {
                self.stats.in_b += 1;
                self.stats.added += 1;
                return self.line(b"A", &t.key);
            }
            (Some(Item::Tensor(a)), Some(Item::Tensor(b))) => (a, b),
            _ => return,
        };
        self.stats.in_a += 1;
        self.stats.in_b += 1;
        if ta.dtype != tb.dtype || ta.shape != tb.shape {
            if let Some(tol) = self.values {
                if self.dequantized_pair(&ta, &tb, tol).is_some() {
                    return;
                }
            }
            self.stats.typed += 1;
            return self.line(b"T", &ta.key);
        }
        let by_index = if self.exact {
            None
        } else {
            match self.index_equal(&ta, &tb) {
                Ok(v) => v,
                Err((side, e)) => return self.trouble_on(side, &format!("{}: {e}", show(&ta.key))),
            }
        };
        let equal = match by_index {
            Some(eq) => {
                self.stats.by_index += 1;
                eq
            }
            None => {
                self.stats.by_bytes += 1;
                match self.bytes_equal(&ta, &tb) {
                    Ok(eq) => eq,
                    Err((side, e)) => {
                        return self.trouble_on(side, &format!("{}: {e}", show(&ta.key)))
                    }
                }
            }
        };
        let values = match self.values.filter(|_| !equal) {
            Some(tol) => {
                // Both sides quantized alike: their dequantized values.
                let ((ca, ea), (cb, eb)) = match (
                    self.dequantized_of(Side::A, &ta),
                    self.dequantized_of(Side::B, &tb),
                ) {
                    (Some(x), Some(y)) => (x, y),
                    _ => ((self.a, ta.clone()), (self.b, tb.clone())),
                };
                match Self::value_diff((ca, &ea), (cb, &eb), tol) {
                    Ok(v) => v,
                    Err((side, e)) => {
                        return self.trouble_on(side, &format!("{}: {e}", show(&ta.key)))
                    }
                }
            }
            None => None,
        };
        // Equal within the tolerance: every element (numbers compare as numbers: 0.0 == -0.0).
        let equal = equal || values.as_ref().is_some_and(|v| v.differing == 0);
        if equal {
            self.stats.equal += 1;
            if self.same {
                self.line(b"=", &ta.key);
            }
        } else {
            self.stats.modified += 1;
            match &values {
                Some(v) => self.value_line(b"M", &ta.key, &ta.shape, v),
                None => self.line(b"M", &ta.key),
            }
        }
    }

    /// What the indexes say of two tensors of the same dtype and shape: `Some(equal)`, or
    /// `None` when they cannot tell.
    fn index_equal(
        &self,
        ta: &crate::cmd::model::TensorInfo,
        tb: &crate::cmd::model::TensorInfo,
    ) -> Result<Option<bool>, (Side, String)> {
        match (ta.partitioned, tb.partitioned) {
            (false, false) => Ok(match (ta.crc, tb.crc) {
                (Some(x), Some(y)) => Some(x == y && ta.nbytes == tb.nbytes),
                _ => None,
            }),
            (true, true) => {
                // The same slicing: slice by slice. Otherwise only the bytes can tell.
                let mut pa = self.a.pieces(ta).map_err(|e| (Side::A, e.to_string()))?;
                let mut pb = self.b.pieces(tb).map_err(|e| (Side::B, e.to_string()))?;
                pa.sort_by(|x, y| x.extent.cmp(&y.extent));
                pb.sort_by(|x, y| x.extent.cmp(&y.extent));
                if pa.len() != pb.len() || pa.iter().zip(&pb).any(|(x, y)| x.extent != y.extent) {
                    return Ok(None);
                }
                let mut equal = true;
                for (x, y) in pa.iter().zip(&pb) {
                    match (x.crc, y.crc) {
                        (Some(cx), Some(cy)) => equal &= cx == cy && x.nbytes == y.nbytes,
                        _ => return Ok(None),
                    }
                }
                Ok(Some(equal))
            }
            _ => Ok(None),
        }
    }

    /// Compares the served bytes (partitioned tensors reassembled) chunk by chunk.
    fn bytes_equal(
        &self,
        ta: &crate::cmd::model::TensorInfo,
        tb: &crate::cmd::model::TensorInfo,
    ) -> Result<bool, (Side, String)> {
        let na = self
            .a
            .served_size(ta)
            .map_err(|e| (Side::A, e.to_string()))?;
        let nb = self
            .b
            .served_size(tb)
            .map_err(|e| (Side::B, e.to_string()))?;
        if na != nb {
            return Ok(false);
        }
        let mut off = 0u64;
        while off < na {
            let n = (na - off).min(CHUNK as u64) as usize;
            let x = self
                .a
                .read_served(ta, off, n)
                .map_err(|e| (Side::A, e.to_string()))?;
            let y = self
                .b
                .read_served(tb, off, n)
                .map_err(|e| (Side::B, e.to_string()))?;
            if x.len() != n || y.len() != n {
                let side = if x.len() != n { Side::A } else { Side::B };
                return Err((side, format!("short read at byte {off}")));
            }
            if x != y {
                return Ok(false);
            }
            off += n as u64;
        }
        Ok(true)
    }
}

/// Which of the two checkpoints a failure is in.
#[derive(Clone, Copy)]
enum Side {
    A = 0,
    B = 1,
}

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(&escape(key)).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The float32 loop gives what `add` gives element by element: NaNs on one side differ and
    /// stay out of the figures, NaNs on both sides are equal, infinities as numbers.
    #[test]
    fn the_float32_loop_is_add_element_by_element() {
        let a = [1.0f32, f32::NAN, f32::NAN, 4.0, f32::INFINITY, 0.0, -3.0];
        let b = [1.0f32, 2.0, f32::NAN, 2.0, f32::INFINITY, 1.0, 0.0];
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        for tol in [
            Tolerance::default(),
            Tolerance {
                atol: 1.5,
                rtol: 0.25,
            },
        ] {
            let mut want = ValueDiff::default();
            for (i, (&x, &y)) in a.iter().zip(&b).enumerate() {
                want.add(10 + i as u64, (f64::from(x), 0.0), (f64::from(y), 0.0), tol);
            }
            assert_eq!(ValueDiff::f32_block(&bytes(&a), &bytes(&b), 10, tol), want);
        }
        let v = ValueDiff::f32_block(&bytes(&a), &bytes(&b), 0, Tolerance::default());
        assert_eq!((v.elements, v.differing, v.first), (7, 4, Some(1)));
        assert_eq!((v.max_abs, v.max_rel), (3.0, 1.0));
    }
}
