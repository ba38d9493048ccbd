//! `tensors.tsv` and `summary.txt`: a checkpoint's tensors as a table for `awk`/`sort`/`column`,
//! and at a glance for people. Both are built from per-tensor [`TensorRecord`]s in key order.
//!
//! `tensors.tsv` ([`TSV_HEADER`], then one [`tsv_line`] per tensor; each line is produced alone,
//! so the file streams in constant memory whatever the number of tensors):
//! `key dtype shape nbytes path crc32c shard offset`, tab-separated. `dtype` is the `.dtype`
//! name; `shape` the dims separated by single spaces (empty for a scalar); `nbytes` the `.bin`
//! size in decimal; `path` the `.bin` path relative to the checkpoint's root; `crc32c` the stored
//! checksum as given by the caller, 8 lowercase hex digits, or `-`; `shard` and `offset` decimal
//! or `-` (partitioned tensors). `key` and `path` are escaped by [`super::escape`] without quote
//! escaping: tab `\t`, newline `\n`, CR `\r`, backslash `\\`, other control characters and every
//! byte of a non-UTF-8 sequence `\xHH` (Python: `codecs.escape_decode(field.encode())[0]` gives
//! the raw bytes back). No field holds a raw tab or newline.
//!
//! `summary.txt` ([`Summary`]): the totals (`tensors`, `parameters`, `bytes` with a human size),
//! then three tables — by dtype (alphabetical), by role, by scope (key order) — with columns
//! `tensors parameters bytes size`. Numbers have thousands separators (`1,234,567`); sizes are
//! binary with one decimal (`12.3 MiB`; under 1 KiB exact: `208 B`).
//! - parameters: elements of every tensor of a fixed-size dtype (all but string, variant,
//!   resource and unknown dtypes, whose rows show `-`).
//! - scope: the key up to its first `/` (TF2 object paths: their first object-path component,
//!   still in TF's escaped spelling); the whole key if it has no `/`; `(empty)` for a key starting
//!   with `/`. At most [`MAX_SCOPES`] scopes are listed (the first ones in key order); the rest are
//!   added up in one `(N more scopes)` row, so memory stays bounded for any checkpoint.
//! - role, one of four rows always shown: `model`, `optimizer slots`, `optimizer other`,
//!   `bookkeeping`, decided from the key by [`crate::parse::roles`] (the same rules pick the
//!   tensors of `weights.safetensors`).
//!
//!   Optimizers with custom names (`AdamOptimizer(name="MyAdam")`) are not recognized.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::parse::dtype::DType;
use crate::render::escape::escape;

/// One tensor as these views need it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TensorRecord<'a> {
    /// The checkpoint key, raw.
    pub(crate) key: &'a [u8],
    pub(crate) dtype: DType,
    pub(crate) shape: &'a [u64],
    /// The `.bin` size.
    pub(crate) nbytes: u64,
    /// The `.bin` path relative to the checkpoint's root (`variables/dense/kernel.bin`), raw.
    pub(crate) path: &'a [u8],
    pub(crate) crc32c: Option<u32>,
    pub(crate) shard: Option<u32>,
    pub(crate) offset: Option<u64>,
}

/// The first line of `tensors.tsv`.
pub(crate) const TSV_HEADER: &str = "key\tdtype\tshape\tnbytes\tpath\tcrc32c\tshard\toffset\n";

/// Appends the `tensors.tsv` line of `r` (ending in `\n`).
pub(crate) fn tsv_line(r: &TensorRecord, out: &mut Vec<u8>) {
    escape(r.key, false, out);
    out.push(b'\t');
    out.extend_from_slice(r.dtype.display_name().as_bytes());
    out.push(b'\t');
    for (i, d) in r.shape.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(d.to_string().as_bytes());
    }
    out.push(b'\t');
    out.extend_from_slice(r.nbytes.to_string().as_bytes());
    out.push(b'\t');
    escape(r.path, false, out);
    out.push(b'\t');
    let field = match r.crc32c {
        Some(c) => format!("{c:08x}"),
        None => "-".into(),
    };
    out.extend_from_slice(field.as_bytes());
    out.push(b'\t');
    let field = r.shard.map_or("-".into(), |s| s.to_string());
    out.extend_from_slice(field.as_bytes());
    out.push(b'\t');
    let field = r.offset.map_or("-".into(), |s| s.to_string());
    out.extend_from_slice(field.as_bytes());
    out.push(b'\n');
}

/// Appends a format's attribute columns to a `tensors.tsv` line made by [`tsv_line`] (before
/// its `\n`): one tab-separated field each, `-` where absent, escaped as keys are.
pub(crate) fn tsv_extra(values: &[Option<String>], columns: usize, out: &mut Vec<u8>) {
    let nl = out.last() == Some(&b'\n');
    if nl {
        out.pop();
    }
    for i in 0..columns {
        out.push(b'\t');
        match values.get(i).and_then(|v| v.as_deref()) {
            Some(v) => escape(v.as_bytes(), false, out),
            None => out.push(b'-'),
        }
    }
    if nl {
        out.push(b'\n');
    }
}

/// Scopes listed by name in `summary.txt`; later ones share one row.
pub(crate) const MAX_SCOPES: usize = 1000;

/// Tensor count, parameters and bytes of a group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) tensors: u64,
    pub(crate) parameters: u128,
    pub(crate) bytes: u128,
}

impl Totals {
    fn add(&mut self, params: u128, bytes: u64) {
        self.tensors += 1;
        self.parameters = self.parameters.saturating_add(params);
        self.bytes = self.bytes.saturating_add(bytes as u128);
    }
}

pub(crate) use crate::parse::roles::Role;

/// Elements of a shape (saturating).
fn elements(shape: &[u64]) -> u128 {
    shape
        .iter()
        .fold(1u128, |a, &d| a.saturating_mul(d as u128))
}

/// The totals and tables of `summary.txt`, gathered one tensor at a time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Summary {
    total: Totals,
    by_dtype: BTreeMap<String, (Totals, bool)>,
    by_role: [Totals; 4],
    by_scope: BTreeMap<Vec<u8>, Totals>,
    more_count: u64,
    more: Totals,
    last_more_scope: Vec<u8>,
}

impl Summary {
    pub(crate) fn new() -> Summary {
        Summary::default()
    }

    /// Adds one tensor (in key order, for the scope limit to keep the first scopes).
    pub(crate) fn add(&mut self, r: &TensorRecord) {
        let counted = r.dtype.elem_size().is_some();
        let params = if counted { elements(r.shape) } else { 0 };
        self.total.add(params, r.nbytes);
        let d = self
            .by_dtype
            .entry(r.dtype.display_name())
            .or_insert((Totals::default(), counted));
        d.0.add(params, r.nbytes);
        let role = Role::of_tensor(r.key, r.shape);
        if let Some(i) = Role::ALL.iter().position(|&x| x == role) {
            self.by_role[i].add(params, r.nbytes);
        }
        let scope = match r.key.iter().position(|&b| b == b'/') {
            Some(i) => &r.key[..i],
            None => r.key,
        };
        if let Some(t) = self.by_scope.get_mut(scope) {
            t.add(params, r.nbytes);
        } else if self.by_scope.len() < MAX_SCOPES {
            let mut t = Totals::default();
            t.add(params, r.nbytes);
            self.by_scope.insert(scope.to_vec(), t);
        } else {
            // Keys arrive sorted, so a scope's tensors are adjacent: comparing with the last
            // overflow scope counts distinct scopes without keeping them.
            if self.more_count == 0 || self.last_more_scope != scope {
                self.more_count += 1;
                self.last_more_scope = scope.to_vec();
            }
            self.more.add(params, r.nbytes);
        }
    }

    /// Totals over every tensor added.
    #[cfg(test)]
    pub(crate) fn total(&self) -> Totals {
        self.total
    }

    /// Totals of one role.
    #[cfg(test)]
    pub(crate) fn role(&self, role: Role) -> Totals {
        Role::ALL
            .iter()
            .position(|&x| x == role)
            .and_then(|i| self.by_role.get(i).copied())
            .unwrap_or_default()
    }

    /// `summary.txt`.
    pub(crate) fn to_text(&self) -> Vec<u8> {
        let mut o = String::new();
        let t = self.total;
        let _ = writeln!(o, "tensors: {}", thousands(t.tensors as u128));
        let _ = writeln!(o, "parameters: {}", thousands(t.parameters));
        let _ = writeln!(o, "bytes: {} ({})", thousands(t.bytes), human_size(t.bytes));
        let dtype_rows = self
            .by_dtype
            .iter()
            .map(|(name, (t, counted))| row(name.clone(), t, *counted))
            .collect();
        table(&mut o, "dtype", dtype_rows);
        let role_rows = Role::ALL
            .iter()
            .zip(&self.by_role)
            .map(|(r, t)| row(r.name().to_string(), t, true))
            .collect();
        table(&mut o, "role", role_rows);
        let mut scope_rows: Vec<[String; 5]> = self
            .by_scope
            .iter()
            .map(|(name, t)| {
                let name = if name.is_empty() {
                    "(empty)".to_string()
                } else {
                    let mut e = Vec::new();
                    escape(name, false, &mut e);
                    String::from_utf8_lossy(&e).into_owned()
                };
                row(name, t, true)
            })
            .collect();
        if self.more_count > 0 {
            scope_rows.push(row(
                format!("({} more scopes)", thousands(self.more_count as u128)),
                &self.more,
                true,
            ));
        }
        table(&mut o, "scope", scope_rows);
        o.into_bytes()
    }
}

fn row(name: String, t: &Totals, counted: bool) -> [String; 5] {
    [
        name,
        thousands(t.tensors as u128),
        if counted {
            thousands(t.parameters)
        } else {
            "-".into()
        },
        thousands(t.bytes),
        human_size(t.bytes),
    ]
}

/// A blank line, then a table: first column left-aligned, the others right-aligned, two spaces
/// between columns.
fn table(o: &mut String, first: &str, rows: Vec<[String; 5]>) {
    let head = [first, "tensors", "parameters", "bytes", "size"].map(String::from);
    let mut width = [0usize; 5];
    for r in std::iter::once(&head).chain(&rows) {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    o.push('\n');
    for r in std::iter::once(&head).chain(&rows) {
        for (i, (cell, w)) in r.iter().zip(width).enumerate() {
            let pad = w - cell.chars().count();
            if i == 0 {
                o.push_str(cell);
                o.extend(std::iter::repeat_n(' ', pad));
            } else {
                o.push_str("  ");
                o.extend(std::iter::repeat_n(' ', pad));
                o.push_str(cell);
            }
        }
        o.push('\n');
    }
}

/// `1234567` as `1,234,567`.
pub(crate) fn thousands(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() * 4 / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A binary size with one decimal (`12.3 MiB`); bytes exactly under 1 KiB (`208 B`).
pub(crate) fn human_size(bytes: u128) -> String {
    const UNITS: [&str; 8] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while unit + 1 < UNITS.len() && format!("{v:.1}").parse::<f64>().unwrap_or(v) >= 1024.0 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rec {
        key: Vec<u8>,
        dtype: i32,
        shape: Vec<u64>,
        nbytes: u64,
    }

    fn rec(key: &[u8], dtype: i32, shape: &[u64], nbytes: u64) -> Rec {
        Rec {
            key: key.to_vec(),
            dtype,
            shape: shape.to_vec(),
            nbytes,
        }
    }

    fn summary(recs: &[Rec]) -> Summary {
        let mut s = Summary::new();
        for r in recs {
            s.add(&TensorRecord {
                key: &r.key,
                dtype: DType(r.dtype),
                shape: &r.shape,
                nbytes: r.nbytes,
                path: b"",
                crc32c: None,
                shard: None,
                offset: None,
            });
        }
        s
    }

    #[test]
    fn tsv_lines_by_hand() {
        let mut out = TSV_HEADER.as_bytes().to_vec();
        tsv_line(
            &TensorRecord {
                key: b"dense/kernel",
                dtype: DType(1),
                shape: &[3, 4],
                nbytes: 48,
                path: b"variables/dense/kernel.bin",
                crc32c: Some(0x0012_abcd),
                shard: Some(0),
                offset: Some(220),
            },
            &mut out,
        );
        tsv_line(
            &TensorRecord {
                key: b"odd/a\tb\\c\nd\xff\"",
                dtype: DType(7),
                shape: &[],
                nbytes: 21,
                path: b"variables/odd/a\tb\\c\nd%FF\".bin",
                crc32c: None,
                shard: None,
                offset: None,
            },
            &mut out,
        );
        tsv_line(
            &TensorRecord {
                key: b"emb",
                dtype: DType(99),
                shape: &[10, 0, 3],
                nbytes: 0,
                path: b"variables/emb.bin",
                crc32c: Some(u32::MAX),
                shard: Some(2),
                offset: Some(u64::MAX),
            },
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "key\tdtype\tshape\tnbytes\tpath\tcrc32c\tshard\toffset\n\
             dense/kernel\tfloat32\t3 4\t48\tvariables/dense/kernel.bin\t0012abcd\t0\t220\n\
             odd/a\\tb\\\\c\\nd\\xff\"\tstring\t\t21\tvariables/odd/a\\tb\\\\c\\nd%FF\".bin\t-\t-\t-\n\
             emb\tunknown_99\t10 0 3\t0\tvariables/emb.bin\tffffffff\t2\t18446744073709551615\n"
        );
    }

    /// The TF1 Adam fixture's keys (tests/fixtures/expected/tf1_adam.model.ckpt-3.json).
    fn tf1_adam() -> Vec<Rec> {
        vec![
            rec(b"beta1_power", 1, &[], 4),
            rec(b"beta2_power", 1, &[], 4),
            rec(b"dense/bias", 1, &[4], 16),
            rec(b"dense/bias/Adam", 1, &[4], 16),
            rec(b"dense/bias/Adam_1", 1, &[4], 16),
            rec(b"dense/kernel", 1, &[3, 4], 48),
            rec(b"dense/kernel/Adam", 1, &[3, 4], 48),
            rec(b"dense/kernel/Adam_1", 1, &[3, 4], 48),
            rec(b"global_step", 9, &[], 8),
        ]
    }

    #[test]
    fn tf1_summary_by_hand() {
        let s = summary(&tf1_adam());
        let want = "\
tensors: 9
parameters: 51
bytes: 208 (208 B)

dtype    tensors  parameters  bytes   size
float32        8          50    200  200 B
int64          1           1      8    8 B

role             tensors  parameters  bytes   size
model                  2          16     64   64 B
optimizer slots        4          32    128  128 B
optimizer other        2           2      8    8 B
bookkeeping            1           1      8    8 B

scope        tensors  parameters  bytes   size
beta1_power        1           1      4    4 B
beta2_power        1           1      4    4 B
dense              6          48    192  192 B
global_step        1           1      8    8 B
";
        assert_eq!(String::from_utf8(s.to_text()).unwrap(), want);
    }

    #[test]
    fn tf2_summary_by_hand() {
        // tf2_slots fixture keys, plus a large tensor for separators and sizes.
        let recs = vec![
            rec(b"_CHECKPOINTABLE_OBJECT_GRAPH", 7, &[], 992),
            rec(
                b"big/.ATTRIBUTES/VARIABLE_VALUE",
                1,
                &[1000, 1000],
                4_000_000,
            ),
            rec(b"net/bias/.ATTRIBUTES/VARIABLE_VALUE", 1, &[4], 16),
            rec(
                b"net/bias/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
                1,
                &[4],
                16,
            ),
            rec(
                b"net/bias/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE",
                1,
                &[4],
                16,
            ),
            rec(b"net/kernel/.ATTRIBUTES/VARIABLE_VALUE", 1, &[3, 4], 48),
            rec(
                b"net/kernel/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE",
                1,
                &[3, 4],
                48,
            ),
            rec(
                b"net/kernel/.OPTIMIZER_SLOT/opt/v/.ATTRIBUTES/VARIABLE_VALUE",
                1,
                &[3, 4],
                48,
            ),
            rec(b"odd..name.Sx/.ATTRIBUTES/VARIABLE_VALUE", 3, &[3], 12),
            rec(b"opt/beta1_power/.ATTRIBUTES/VARIABLE_VALUE", 1, &[], 4),
            rec(b"opt/beta2_power/.ATTRIBUTES/VARIABLE_VALUE", 1, &[], 4),
            rec(b"step/.ATTRIBUTES/VARIABLE_VALUE", 9, &[], 8),
        ];
        let s = summary(&recs);
        // parameters: 1,000,000 + 4*3 + 12*3 + 3 + 1 + 1 + 1 = 1,000,054
        // bytes: 992 + 4,000,000 + 48 + 144 + 12 + 8 + 8 = 4,001,212 = 3.8158 MiB
        let want = "\
tensors: 12
parameters: 1,000,054
bytes: 4,001,212 (3.8 MiB)

dtype    tensors  parameters      bytes     size
float32        9   1,000,050  4,000,200  3.8 MiB
int32          1           3         12     12 B
int64          1           1          8      8 B
string         1           -        992    992 B

role             tensors  parameters      bytes     size
model                  5   1,000,020  4,000,084  3.8 MiB
optimizer slots        4          32        128    128 B
optimizer other        2           2          8      8 B
bookkeeping            1           0        992    992 B

scope                         tensors  parameters      bytes     size
_CHECKPOINTABLE_OBJECT_GRAPH        1           0        992    992 B
big                                 1   1,000,000  4,000,000  3.8 MiB
net                                 6          48        192    192 B
odd..name.Sx                        1           3         12     12 B
opt                                 2           2          8      8 B
step                                1           1          8      8 B
";
        assert_eq!(String::from_utf8(s.to_text()).unwrap(), want);
    }

    #[test]
    fn roles() {
        let cases: &[(&[u8], Role)] = &[
            (b"dense/kernel/Adam", Role::OptimizerSlot),
            (b"dense/kernel/Adam_1", Role::OptimizerSlot),
            (b"w/Momentum", Role::OptimizerSlot),
            (b"w/RMSProp_1", Role::OptimizerSlot),
            (b"Adam", Role::Model),
            (b"dense/Adam_x", Role::Model),
            (b"beta1_power", Role::OptimizerOther),
            (b"beta2_power_1", Role::OptimizerOther),
            (b"global_step", Role::Bookkeeping),
            (b"save_counter/.ATTRIBUTES/VARIABLE_VALUE", Role::Bookkeeping),
            (b"global_step/.ATTRIBUTES/VARIABLE_VALUE", Role::Bookkeeping),
            // Keras files: a Keras 3 file's optimizer, a legacy .h5's.
            (b"optimizer/vars/0", Role::OptimizerOther),
            (b"optimizer/vars/1", Role::OptimizerOther),
            (b"optimizer/vars/2", Role::OptimizerSlot),
            (b"optimizer/vars/47", Role::OptimizerSlot),
            (b"optimizer_weights/adam/dense_kernel_momentum", Role::OptimizerSlot),
            (b"optimizer_weights/adam/dense_kernel_velocity", Role::OptimizerSlot),
            (b"optimizer_weights/adam/iteration", Role::OptimizerOther),
            (b"optimizer_weights/adam/learning_rate", Role::OptimizerOther),
            // Keras 2 (tf_keras) and older Keras `.h5`.
            (b"optimizer_weights/Adam/iter:0", Role::OptimizerOther),
            (b"optimizer_weights/Adam/dense/kernel/m:0", Role::OptimizerSlot),
            (b"optimizer_weights/Adam/dense/kernel/v:0", Role::OptimizerSlot),
            (b"optimizer_weights/Adam/iterations:0", Role::OptimizerOther),
            (b"optimizer_weights/training/Adam/Variable_3:0", Role::OptimizerSlot),
            (b"model_weights/dense/dense/kernel:0", Role::Model),
            (b"layers/dense/vars/0", Role::Model),
            (b"_CHECKPOINTABLE_OBJECT_GRAPH", Role::Bookkeeping),
            // Keras 3 (tests/fixtures/expected/tf2_keras.json).
            (b"optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE", Role::OptimizerOther),
            (b"optimizer/_learning_rate/.ATTRIBUTES/VARIABLE_VALUE", Role::OptimizerOther),
            (b"optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE", Role::Model),
            (b"optimizer/_variables/2/.ATTRIBUTES/VARIABLE_VALUE", Role::OptimizerSlot),
            (
                b"model/layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE",
                Role::OptimizerSlot,
            ),
            (b"model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE", Role::Model),
        ];
        for &(k, want) in cases {
            assert_eq!(Role::of(k), want, "{}", String::from_utf8_lossy(k));
        }
        // With a learning-rate schedule, Keras 3's `vars/1` is the first slot: not a scalar.
        let of = Role::of_tensor;
        assert_eq!(of(b"optimizer/vars/1", &[]), Role::OptimizerOther);
        assert_eq!(of(b"optimizer/vars/1", &[3, 2]), Role::OptimizerSlot);
        assert_eq!(of(b"optimizer/vars/0", &[]), Role::OptimizerOther);
        assert_eq!(of(b"layers/dense/vars/1", &[3]), Role::Model);
    }

    #[test]
    fn totals_are_the_sums() {
        let mut recs = tf1_adam();
        recs.push(rec(b"/leading", 1, &[3], 12));
        recs.push(rec(b"s", 7, &[2], 40));
        recs.push(rec(b"v", 21, &[], 3));
        let s = summary(&recs);
        let t = s.total();
        assert_eq!(t.tensors, recs.len() as u64);
        assert_eq!(t.bytes, recs.iter().map(|r| r.nbytes as u128).sum::<u128>());
        let params: u128 = recs
            .iter()
            .filter(|r| ![7, 21].contains(&r.dtype))
            .map(|r| r.shape.iter().product::<u64>() as u128)
            .sum();
        assert_eq!(t.parameters, params);
        let by_role = Role::ALL.iter().fold(Totals::default(), |mut a, &r| {
            let x = s.role(r);
            a.tensors += x.tensors;
            a.parameters += x.parameters;
            a.bytes += x.bytes;
            a
        });
        assert_eq!(by_role, t);
        let text = String::from_utf8(s.to_text()).unwrap();
        assert!(text.contains("\n(empty)  "), "{text}");
    }

    #[test]
    fn many_scopes_stay_bounded() {
        let recs: Vec<Rec> = (0..MAX_SCOPES + 500)
            .flat_map(|i| {
                let a = format!("s{i:05}/a");
                let b = format!("s{i:05}/b");
                [rec(a.as_bytes(), 1, &[2], 8), rec(b.as_bytes(), 1, &[1], 4)]
            })
            .collect();
        let s = summary(&recs);
        assert_eq!(s.by_scope.len(), MAX_SCOPES);
        assert_eq!(s.more_count, 500);
        assert_eq!(s.more.tensors, 1000);
        let text = String::from_utf8(s.to_text()).unwrap();
        assert!(
            text.ends_with("(500 more scopes)    1,000       1,500  6,000  5.9 KiB\n"),
            "{}",
            &text[text.len() - 200..]
        );
    }

    /// Every fixture's TensorFlow record (tests/fixtures/expected/*.json) through `tsv_line` and
    /// `Summary`, parsed back and summed independently by Python (`python3`, no numpy needed).
    #[test]
    fn fixtures_round_trip_through_python() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/expected");
        let mut files: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        assert!(files.len() >= 8);
        let dir = tempfile::tempdir().unwrap();
        for json in files {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
            let unhex = |h: &str| -> Vec<u8> {
                (0..h.len() / 2)
                    .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
                    .collect()
            };
            let mut tsv = TSV_HEADER.as_bytes().to_vec();
            let mut sum = Summary::new();
            for t in v["tensors"].as_array().unwrap() {
                let key = match t["key_hex"].as_str() {
                    Some(h) => unhex(h),
                    None => t["key"].as_str().unwrap().as_bytes().to_vec(),
                };
                let npy = match t["npy_path_hex"].as_str() {
                    Some(h) => unhex(h),
                    None => t["npy_path"].as_str().unwrap().as_bytes().to_vec(),
                };
                let path = [b"variables/".as_slice(), &npy[..npy.len() - 4], b".bin"].concat();
                let shape: Vec<u64> = t["shape"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| d.as_u64().unwrap())
                    .collect();
                let stored = &t["stored"];
                let r = TensorRecord {
                    key: &key,
                    dtype: DType(t["dtype_enum"].as_i64().unwrap() as i32),
                    shape: &shape,
                    nbytes: t["nbytes"].as_u64().unwrap(),
                    path: &path,
                    crc32c: stored["crc32c_masked"].as_u64().map(|c| c as u32),
                    shard: stored["shard_id"].as_u64().map(|c| c as u32),
                    offset: stored["offset"].as_u64(),
                };
                tsv_line(&r, &mut tsv);
                sum.add(&r);
            }
            let stem = json.file_stem().unwrap().to_str().unwrap().to_string();
            std::fs::write(dir.path().join(format!("{stem}.tsv")), &tsv).unwrap();
            std::fs::write(dir.path().join(format!("{stem}.txt")), sum.to_text()).unwrap();
        }
        let script = r#"
import sys, json, glob, os, codecs, math
root, out = sys.argv[1], sys.argv[2]
n = 0
for path in sorted(glob.glob(os.path.join(root, "*.json"))):
    stem = os.path.basename(path)[:-5]
    rec = json.load(open(path))["tensors"]
    lines = open(os.path.join(out, stem + ".tsv"), "rb").read().decode("utf-8").split("\n")
    assert lines[0] == "key\tdtype\tshape\tnbytes\tpath\tcrc32c\tshard\toffset", lines[0]
    assert lines[-1] == "" and len(lines) == len(rec) + 2, (stem, len(lines))
    for line, t in zip(lines[1:], rec):
        f = line.split("\t")
        assert len(f) == 8, line
        key = bytes.fromhex(t["key_hex"]) if "key_hex" in t else t["key"].encode("utf-8")
        assert codecs.escape_decode(f[0].encode("utf-8"))[0] == key, (f[0], key)
        assert f[1] == t["dtype"], (f[1], t["dtype"])
        assert f[2] == " ".join(str(d) for d in t["shape"]), f[2]
        assert int(f[3]) == t["nbytes"]
        s = t.get("stored")
        if s:
            assert f[5] == "%08x" % s["crc32c_masked"] and int(f[6]) == s["shard_id"] and int(f[7]) == s["offset"], line
        else:
            assert f[5:] == ["-", "-", "-"], line
        n += 1
    text = open(os.path.join(out, stem + ".txt")).read().split("\n")
    fields = dict(l.split(": ", 1) for l in text[:3])
    num = lambda s: int(s.split(" ")[0].replace(",", ""))
    assert num(fields["tensors"]) == len(rec)
    assert num(fields["bytes"]) == sum(t["nbytes"] for t in rec), stem
    params = sum(math.prod(t["shape"]) for t in rec if t["dtype"] not in ("string", "variant", "resource"))
    assert num(fields["parameters"]) == params, (stem, fields["parameters"], params)
print("ok", n)
"#;
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(script)
            .arg(&root)
            .arg(dir.path())
            .output()
            .expect("python3 must be installed");
        assert!(
            out.status.success(),
            "python3 check failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("ok "));
    }

    #[test]
    fn numbers_and_sizes() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(u64::MAX as u128), "18,446,744,073,709,551,615");
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KiB");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(12_897_485), "12.3 MiB");
        assert_eq!(human_size(1024 * 1024 - 1), "1.0 MiB");
        assert_eq!(human_size(1 << 30), "1.0 GiB");
        assert_eq!(human_size(u64::MAX as u128), "16.0 EiB");
    }
}
