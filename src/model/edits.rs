//! An edits directory ([`crate::formats::edits`]) as the engines use it: its records as
//! `export`'s edits (`commit`, `export --edits`), and what they change in the source, tensor by
//! tensor, as `tfmount edits` lists it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use super::export::{Edit, Glob, SetValue, Step};
use crate::formats::edited::Edited;
use crate::formats::edits::{Journal, Record};
use crate::formats::tensors::{walk, TensorSet};

/// The journal's records as `export`'s edits, in order: consecutive drops as one selection,
/// a rename after the drop of what it replaces (a tensor moved onto another replaces it, as
/// `mv` does), a set from its `.npy` file.
pub(crate) fn to_export(j: &Journal) -> Result<Vec<Edit>, String> {
    let mut out = Vec::new();
    let mut keys = HashSet::new();
    let mut prefixes = Vec::new();
    let flush = |out: &mut Vec<Edit>, keys: &mut HashSet<Vec<u8>>, prefixes: &mut Vec<Vec<u8>>| {
        if !keys.is_empty() || !prefixes.is_empty() {
            out.push(Edit::Drop(Glob::keys(
                std::mem::take(keys),
                std::mem::take(prefixes),
            )));
        }
    };
    let under = |k: &[u8]| {
        let mut p = k.to_vec();
        p.push(b'/');
        p
    };
    for r in j.records() {
        match r {
            Record::Drop { key, subtree } => {
                if *subtree {
                    prefixes.push(under(key));
                } else {
                    keys.insert(key.clone());
                }
            }
            Record::Rename { key, to, subtree } => {
                if key == to {
                    continue;
                }
                flush(&mut out, &mut keys, &mut prefixes);
                let dropped = if *subtree {
                    Glob::keys(HashSet::new(), vec![under(to)])
                } else {
                    Glob::keys(HashSet::from([to.clone()]), Vec::new())
                };
                out.push(Edit::Drop(dropped));
                out.push(Edit::rename_exact(key, to, *subtree)?);
            }
            Record::Set { key, npy } => {
                flush(&mut out, &mut keys, &mut prefixes);
                out.push(Edit::Set {
                    key: key.clone(),
                    value: SetValue::Npy(j.path_of(npy)),
                });
            }
        }
    }
    flush(&mut out, &mut keys, &mut prefixes);
    Ok(out)
}

/// What the edits change, tensor by tensor, in key order of the source (then the new
/// tensors): `D key` (dropped), `R old -> new` (renamed), `S key (shape, dtype)` (new values,
/// of a tensor there or new), as `export --dry-run` prints its plan.
pub(crate) fn changes(source: Arc<dyn TensorSet>, j: &Journal) -> Result<Vec<Step>, String> {
    let edited = Edited::new(source.clone(), j.records(), j.dir())?;
    let mut steps = Vec::new();
    let mut set_keys = HashSet::new();
    // The tensors set and live now.
    let mut sets = Vec::new();
    let mut p = edited.seek(b"").map_err(|e| e.to_string())?;
    while let Some(q) = p {
        if let Some(a) = edited.added(q) {
            let key = edited.key(q).map_err(|e| e.to_string())?;
            set_keys.insert(key.clone());
            sets.push(Step::Set(key, a.shape.clone(), a.dtype));
        }
        p = edited.next(q).map_err(|e| e.to_string())?;
    }
    let err = |e: crate::error::FsError| format!("{}: {e}", source.path().display());
    walk(source.as_ref(), |pos, key| {
        let now = edited.key(pos)?;
        if !edited.live(pos)? {
            // A tensor given new values (under its own key or one it was renamed to) is a
            // set, not a drop.
            if !set_keys.contains(&now) {
                steps.push(Step::Drop(key.to_vec()));
            } else if now != key {
                steps.push(Step::Rename(key.to_vec(), now));
            }
        } else if now != key {
            steps.push(Step::Rename(key.to_vec(), now));
        }
        Ok(true)
    })
    .map_err(err)?;
    steps.extend(sets);
    Ok(steps)
}

/// Opens the edits directory `dir` (for reading) and its source's tensors.
pub(crate) fn open(dir: &Path) -> Result<(Journal, super::open::Ckpt), String> {
    let j = Journal::read(dir)?;
    let source = j.named_source()?;
    let ck = super::open::one_checkpoint(Path::new(&source))?;
    Ok((j, ck))
}
