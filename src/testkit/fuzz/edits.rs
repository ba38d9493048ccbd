//! Fuzz body for an edits directory's journal (`tfmount::formats::edits`, the `-o edit` mount's
//! and `tfmount commit`'s input): arbitrary bytes parsed as a journal and, when they parse,
//! replayed over a small checkpoint ([`Edited`]), with values files `tensors/0.npy` to
//! `tensors/3.npy` there (one of them not an `.npy`).
//!
//! Invariants: parsing and replaying return (an error or not), never panic; a replayed set
//! lists in strictly increasing key order, ends, and every listed position's key is the one the
//! listing showed.

use std::sync::{Arc, OnceLock};

use crate::formats::edited::Edited;
use crate::formats::edits::records_of;
use crate::formats::tensors::TensorSet;
use crate::parse::dtype::DType;
use crate::testkit::writer::CheckpointWriter;

/// The source's tensors and the edits directory, made once per process.
fn world() -> Option<&'static (tempfile::TempDir, Arc<dyn TensorSet>)> {
    static WORLD: OnceLock<Option<(tempfile::TempDir, Arc<dyn TensorSet>)>> = OnceLock::new();
    WORLD
        .get_or_init(|| {
            let dir = super::scratch_dir();
            let prefix = dir.path().join("ckpt");
            let mut w = CheckpointWriter::new(&prefix, 1).ok()?;
            for k in ["a", "a/b", "a/c/d", "b/x", "b/y", "c"] {
                w.add(k.as_bytes(), DType(1), &[1], &1f32.to_le_bytes(), 0)
                    .ok()?;
            }
            w.finish().ok()?;
            let t = dir.path().join("tensors");
            std::fs::create_dir_all(&t).ok()?;
            for (i, shape) in [&[2u64][..], &[], &[1, 3]].iter().enumerate() {
                let mut b = crate::parse::npy::header("<f4", shape)?;
                let n: u64 = shape.iter().product();
                b.extend(std::iter::repeat_n(0u8, 4 * n as usize));
                std::fs::write(t.join(format!("{i}.npy")), b).ok()?;
            }
            std::fs::write(t.join("3.npy"), b"not an npy").ok()?;
            let probed = crate::probe::probe(&prefix).ok()?;
            let crate::probe::Probed::Checkpoint(found) = probed else {
                return None;
            };
            let store = crate::source::local::LocalStore;
            let ctx = crate::formats::OpenCtx {
                store: &store,
                shared: None,
                caches: crate::formats::caches::Caches::new(1 << 20),
                verify: true,
                crc_first: false,
            };
            let set = found.format.open(&ctx, &found).ok()?.tensors();
            Some((dir, set))
        })
        .as_ref()
}

pub(crate) fn edits(data: &[u8]) {
    let Ok((records, _)) = records_of(data) else {
        return;
    };
    let Some((dir, set)) = world() else {
        return;
    };
    let Ok(e) = Edited::new(set.clone(), &records, dir.path()) else {
        return;
    };
    let mut pos = e.seek(b"").ok().flatten();
    let mut last: Option<Vec<u8>> = None;
    let mut n = 0;
    while let Some(p) = pos {
        let k = e.key(p).expect("a listed position has a key");
        if let Some(l) = &last {
            assert!(*l < k, "keys out of order: {l:?} then {k:?}");
        }
        last = Some(k);
        n += 1;
        // Six tensors and the header entry, and at most one more per record.
        assert!(n <= 7 + records.len(), "a listing that does not end");
        pos = e.next(p).expect("next of a listed position");
    }
}

/// Journals to start from: the header and each kind of record.
pub(crate) fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let head = r#"{"source":"/x","tfmount-edits":1}"#;
    [
        (
            "drops",
            vec![r#"{"drop":"a"}"#, r#"{"drop":"b","subtree":true}"#],
        ),
        (
            "renames",
            vec![
                r#"{"rename":"a","to":"z","subtree":true}"#,
                r#"{"rename":"c","to":"a/c"}"#,
            ],
        ),
        (
            "sets",
            vec![
                r#"{"set":"a/b","npy":"tensors/0.npy"}"#,
                r#"{"set":"new","npy":"tensors/2.npy"}"#,
                r#"{"set":"x","npy":"tensors/3.npy"}"#,
            ],
        ),
    ]
    .into_iter()
    .map(|(name, lines)| {
        let mut text = format!("{head}\n");
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        ("edits", name.to_string(), text.into_bytes())
    })
    .collect()
}
