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

use super::lines::{closed, escape, Lines, Val};
use super::open::{Ckpt, Item, TensorInfo, Walk};
use super::values::{self, Side, Tolerance, ValueDiff};

/// Bytes compared at a time when the bytes decide.
const CHUNK: usize = 4 << 20;

/// One line of `tfmount diff A B`: its status (`A`, `D`, `T`, `M`, `=`) and the key, unescaped.
#[cfg(feature = "python")]
pub(crate) type Line = (String, Vec<u8>);

/// What `tfmount diff A B` prints (with `--exact` and `--same` as asked), as `(status, key)`;
/// `Err` with the messages `diff` prints when A or B cannot be used or a tensor of them cannot
/// be read (one per line).
#[cfg(feature = "python")]
pub(crate) fn lines(
    a: &std::path::Path,
    b: &std::path::Path,
    exact: bool,
    same: bool,
    names: bool,
) -> Result<Vec<Line>, String> {
    let (a, b) = (
        super::open::one_checkpoint(a)?,
        super::open::one_checkpoint(b)?,
    );
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

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) in_a: u64,
    pub(crate) in_b: u64,
    pub(crate) added: u64,
    pub(crate) deleted: u64,
    pub(crate) typed: u64,
    pub(crate) modified: u64,
    pub(crate) equal: u64,
    pub(crate) by_index: u64,
    pub(crate) by_bytes: u64,
}

pub(crate) struct Diff<'c> {
    pub(crate) a: &'c Ckpt,
    pub(crate) b: &'c Ckpt,
    pub(crate) exact: bool,
    pub(crate) same: bool,
    pub(crate) out: Lines,
    /// What went wrong, in the words printed (kept for [`lines`]).
    pub(crate) troubles: Vec<String>,
    pub(crate) stats: Stats,
    pub(crate) trouble: bool,
    pub(crate) differ: bool,
    pub(crate) closed: bool,
    /// `--values` (with `--atol`, `--rtol`): how much a changed tensor's values changed.
    pub(crate) values: Option<Tolerance>,
    /// `--names`: tensors matched by their `names/` names, not keys.
    pub(crate) by_name: bool,
    /// With `--names`, the key each name stands for, per side (`[A, B]`): what a dequantized
    /// tensor is found by.
    pub(crate) keys: [HashMap<Vec<u8>, Vec<u8>>; 2],
    /// With `--values`, each side's dequantized tensors by key (made when first needed).
    pub(crate) dequantized: [Option<HashMap<Vec<u8>, TensorInfo>>; 2],
}

/// Why a checkpoint cannot be compared by names: it has no `names/`, or no tensor has a name.
pub(crate) fn named(ck: &Ckpt) -> Result<(), String> {
    match ck.names() {
        None => {
            Err("has no names/ to match tensors by (diff without --names compares keys)".into())
        }
        Some([]) => Err("names/ is empty: no tensor has a name to match by".into()),
        Some(_) => Ok(()),
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
    pub(crate) fn new(a: &'c Ckpt, b: &'c Ckpt, exact: bool, same: bool, out: Lines) -> Diff<'c> {
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
        let label = match side {
            Side::A => "A",
            Side::B => "B",
        };
        self.trouble(label, self.ck(side), what);
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

    pub(crate) fn walk(&mut self) {
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
        let keys = &mut self.keys[side as usize];
        let mut named: Vec<TensorInfo> = Vec::new();
        for (name, key) in ck.names().unwrap_or_default() {
            keys.entry(name.as_bytes().to_vec())
                .or_insert_with(|| key.as_bytes().to_vec());
            if let Some(t) = by_key.get(key.as_bytes()) {
                let mut t = t.clone();
                t.key = name.as_bytes().to_vec();
                named.push(t);
            }
        }
        named.sort_by(|x, y| x.key.cmp(&y.key));
        named.dedup_by(|x, y| x.key == y.key);
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
        match values::compare(ca, &ea, cb, &eb, tol) {
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
                match values::compare(ca, &ea, cb, &eb, tol) {
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
        ta: &crate::model::open::TensorInfo,
        tb: &crate::model::open::TensorInfo,
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
        ta: &crate::model::open::TensorInfo,
        tb: &crate::model::open::TensorInfo,
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

fn show(key: &[u8]) -> String {
    String::from_utf8_lossy(&escape(key)).into_owned()
}
